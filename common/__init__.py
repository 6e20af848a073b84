"""What every room shares and nothing of ours feeds: the one message catalog
(English and Chinese, :mod:`common.catalog`) and the one hierarchy of errors a
user sees with the exit codes (:mod:`common.errors`). ``rules``, ``probes``,
``oomrig``, ``oomsim`` and ``assistant`` all import it; it imports none of them,
so the rooms' import rules hold."""
