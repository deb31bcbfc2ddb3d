from skyinfra_runtime.launcher import main

main()
