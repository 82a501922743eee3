"""Exceptions raised by pkit."""


class PkitError(Exception):
    """Base class for pkit errors."""


class CompileError(PkitError):
    """NVRTC rejected a CUDA source. The message holds the compiler log and the offending lines."""

    def __init__(self, name: str, log: str, source: str):
        self.name, self.log, self.source = name, log, source
        super().__init__(f"compiling {name!r} failed:\n{log.rstrip()}\n{_excerpt(log, source)}")


class PeerTimeout(PkitError):
    """A device-side wait ran past its timeout and trapped; the CUDA context of that process is lost."""

    def __init__(self, kernel: str, line: int, device: int, flag_address: int, expected: int,
                 observed: int, waited_s: float):
        self.kernel, self.line, self.device = kernel, line, device
        self.flag_address, self.expected, self.observed, self.waited_s = flag_address, expected, observed, waited_s
        super().__init__(
            f"kernel {kernel!r} (line {line}) on GPU {device} waited {waited_s:.3f} s for flag "
            f"0x{flag_address:x} to reach {expected} (last seen {observed}) and trapped; the CUDA "
            "context of this process is now unusable: restart the process (or notebook kernel)")


def _excerpt(log: str, source: str, context: int = 2) -> str:
    """Source lines named by `name(LINE): error` entries in an NVRTC log, with a few lines around."""
    import re

    lines = source.splitlines()
    wanted = sorted({int(m) for m in re.findall(r"\((\d+)\): (?:error|catastrophic error)", log)})
    chunks = []
    for n in wanted[:5]:
        lo, hi = max(1, n - context), min(len(lines), n + context)
        chunks.append("\n".join(f"{'>' if i == n else ' '} {i:4d} | {lines[i - 1]}" for i in range(lo, hi + 1)))
    return ("source:\n" + "\n  ...\n".join(chunks)) if chunks else ""
