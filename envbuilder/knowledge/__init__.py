"""Knowledge about the matrix itself: checking it against live package indexes
(``indexcheck``), and reading an axis with its sources (``show``).

Network-touching code lives here, never in ``core``.
"""
