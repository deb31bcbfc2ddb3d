"""How an AWS node's SSH host key is known before the first connection: the keys cloud-init
prints to the serial console at first boot (:func:`host_keys_from_console`, read through EC2's
GetConsoleOutput). The SSH transport (skyinfra/transport/ssh.py) pins them and shows their
fingerprints.
"""

from __future__ import annotations

# cloud-init prints the node's SSH host public keys to the serial console at first boot
# between these lines (its cc_keys_to_console module); EC2's GetConsoleOutput returns them.
CONSOLE_KEYS_BEGIN = "-----BEGIN SSH HOST KEY KEYS-----"
CONSOLE_KEYS_END = "-----END SSH HOST KEY KEYS-----"


def host_keys_from_console(output: str) -> list[str]:
    """The ``<type> <base64>`` lines of the last host-key block cloud-init printed."""
    if CONSOLE_KEYS_BEGIN not in output:
        return []
    block = output.rsplit(CONSOLE_KEYS_BEGIN, 1)[1].split(CONSOLE_KEYS_END, 1)[0]
    keys = []
    for line in block.splitlines():
        fields = line.strip().split()
        if len(fields) >= 2 and (fields[0].startswith(("ssh-", "ecdsa-"))):
            keys.append(f"{fields[0]} {fields[1]}")
    return keys
