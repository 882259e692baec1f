"""Tools run from a checkout, never installed: mutation testing (``tools/mutation.py``) and the
end-to-end benchmark harnesses (:mod:`tools.bench`). Run them from the checkout's root, e.g.
``python -m tools.bench.field``; they import ``runtime`` and ``drivers``, which never import them.
"""
