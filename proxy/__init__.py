"""crossfeed's proxy (all I/O: the aiohttp server, upstream client, relay, turns, store), installed as ``crossfeed.proxy``.

Imported under its bare folder name (``import proxy`` from a checkout's root) it refuses: one file
under two module names makes two classes, two app keys and two context variables that never match.
"""

if __name__ != "crossfeed.proxy":
    raise ImportError(f"import crossfeed.proxy, not {__name__}: crossfeed is installed and run as one package")
