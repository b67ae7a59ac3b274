"""`python -m memrl ...`: memrl's command line (memrl.cli)."""

from memrl.cli import main

main()
