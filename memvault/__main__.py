from .interfaces.quick import main

main()
