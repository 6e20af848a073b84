"""oomvet's conversation room: the command line, the chat session, intake in
Chinese and English, the terminal UI, and the writers of the config and report."""

__version__ = "0.1.0"
