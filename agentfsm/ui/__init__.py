"""The inspector: runs in the browser, read from their traces and checkpoints (`agentfsm ui`)."""
