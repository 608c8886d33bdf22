from workbench.worker.main import main

main()
