from hetflow.cli.main import main

main()
