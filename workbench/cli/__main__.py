"""`python -m workbench.cli ...`: the `workbench` command where no console script is installed
(another environment, a container, the GPU rig)."""
from workbench.cli import run

run()
