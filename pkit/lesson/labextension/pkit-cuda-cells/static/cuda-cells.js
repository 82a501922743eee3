// JupyterLab colours the code cells that start with `%%cuda` (pkit.lesson's cell magic) as C++.
//
// Why an extension: JupyterLab 4 colours every code cell in the kernel's language (Python here), cell magics
// included; no setting, notebook metadata or kernel field maps a cell magic to another language. So this plugin
// sets such a cell's editor MIME type to C++ (a cell's MIME type is not saved in the notebook), and again each time
// the cell's text changes or the notebook sets its cells back to the kernel's language. The editor loads languages
// asynchronously, so of two asked for in a row the first may arrive last: the plugin waits until the language the
// notebook just gave the cell has loaded, then asks for C++.
//
// Written by hand, with no build step: a module-federation container, the one thing JupyterLab asks of a prebuilt
// extension (package.json's jupyterlab._build.load names this file). JupyterLab calls init() with its shared modules
// and get("./extension") for the module whose default export is the list of plugins. The plugin asks for the
// notebook tracker's and the language registry's tokens, which it takes from the shared @jupyterlab/notebook and
// @jupyterlab/codemirror (their newest versions, as singletons resolve): the very objects JupyterLab provides.
//
// Loaded where JupyterLab is told this folder's parent: `jupyter lab --LabApp.extra_labextensions_path=...`.
(function () {
  const CUDA = /^%%cuda\b/;
  const CPP = "text/x-c++src";
  let shared = {};
  let languages = null;  // JupyterLab's editor language registry

  function newest(versions) {
    const parts = (v) => v.split(/[.-]/).map((p) => parseInt(p, 10) || 0);
    const later = (a, b) => {
      const [x, y] = [parts(a), parts(b)];
      const i = x.findIndex((p, k) => p !== y[k]);
      return i >= 0 && x[i] > (y[i] || 0);
    };
    return Object.keys(versions).reduce((best, v) => (best === null || later(v, best) ? v : best), null);
  }

  async function load(name) {
    const versions = shared[name];
    return (await versions[newest(versions)].get())();
  }

  // `this` is the notebook: a code cell that starts with %%cuda is C++, every other one the kernel's language.
  async function colour(model) {
    if (model.type !== "code") return;
    await languages.getLanguage(model.mimeType);
    const want = CUDA.test(model.sharedModel.getSource()) ? CPP : this.codeMimetype;
    if (!model.isDisposed && model.mimeType !== want) model.mimeType = want;
  }

  function watch(notebook) {
    const cells = notebook.model.cells;
    const each = () => {
      for (const model of cells) {
        model.contentChanged.connect(colour, notebook);  // connecting twice is a no-op in Lumino
        model.mimeTypeChanged.connect(colour, notebook);
        colour.call(notebook, model);
      }
    };
    cells.changed.connect(each);
    each();
  }

  async function plugins() {
    const { INotebookTracker } = await load("@jupyterlab/notebook");
    const { IEditorLanguageRegistry } = await load("@jupyterlab/codemirror");
    return [{
      id: "pkit-cuda-cells:plugin",
      description: "Colours the code cells that start with %%cuda as C++.",
      autoStart: true,
      requires: [INotebookTracker, IEditorLanguageRegistry],
      activate: (app, tracker, registry) => {
        languages = registry;
        const follow = (panel) => panel.context.ready.then(() => watch(panel.content));
        tracker.forEach(follow);
        tracker.widgetAdded.connect((_, panel) => follow(panel));
      },
    }];
  }

  window._JUPYTERLAB = window._JUPYTERLAB || {};
  window._JUPYTERLAB["pkit-cuda-cells"] = {
    init: async (scope) => {
      shared = scope;
    },
    get: async (module) => {
      if (module !== "./extension") throw new Error(`pkit-cuda-cells has no module ${module}`);
      const list = await plugins();
      return () => ({ __esModule: true, default: list });
    },
  };
})();
