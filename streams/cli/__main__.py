from streams.cli import main

main()
