from scalesim.cli import main

main()
