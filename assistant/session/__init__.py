"""The session: opening the world (server, rig or simulator), the loop between the
rules and the probes, the answers a user gives and the terminal UI that shows it.
"""
