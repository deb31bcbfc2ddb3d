"""The local target: every node is a folder and a loopback address on this machine."""
