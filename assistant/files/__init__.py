"""The files a user leaves with, written all or nothing: the config, the
ready-to-apply Modelfile / env / drop-in, and the report beside them.
"""
