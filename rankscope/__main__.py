from rankscope.cli import main

main()
