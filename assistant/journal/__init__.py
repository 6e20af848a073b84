"""The session journal: every fact on disk before it is used, read back to resume or re-render.
"""
