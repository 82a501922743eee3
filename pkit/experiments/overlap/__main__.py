"""`python -m pkit.experiments.overlap STUDY... [--record]`: `cli.main`."""
from .cli import main

main()
