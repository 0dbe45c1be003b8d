"""crossfeed's translators (pure mapping and stream machines: no I/O), installed as ``crossfeed.translators``.

Imported under its bare folder name (``import translators`` from a checkout's root) it refuses: one file
under two module names makes two classes, two app keys and two context variables that never match.
"""

if __name__ != "crossfeed.translators":
    raise ImportError(f"import crossfeed.translators, not {__name__}: crossfeed is installed and run as one package")
