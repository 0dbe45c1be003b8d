"""crossfeed: a streaming translation proxy between OpenAI's Chat Completions and Responses APIs.

The repository keeps the product in two top-level folders, ``proxy/`` (all I/O) and ``translators/``
(pure mapping and stream machines); they are installed as ``crossfeed.proxy`` and
``crossfeed.translators``, so crossfeed claims one name in site-packages. In a checkout,
``crossfeed/proxy`` and ``crossfeed/translators`` are links to those folders, so the tree runs and
type-checks under the same names without an install (docs/DESIGN.md, "The layout").
"""
