from skyinfra_runtime.command import main

main()
