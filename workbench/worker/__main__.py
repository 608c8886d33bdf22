from workbench.worker.boot import run

run()
