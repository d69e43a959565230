"""Collision detection: narrowphase routines for primitive geom pairs (more to come).

``primitive`` holds one pure function per MuJoCo primitive pair type; each collides ONE pair and
returns a fixed-size ``Contacts`` tuple (callers ``jax.vmap`` it over all pairs of that type).
``ROUTINES`` maps ``(type1, type2)`` (geom type ids, type1 <= type2) to ``(fn, ncon)``.
"""

from .primitive import ROUTINES, Contacts, make_frame

__all__ = ['ROUTINES', 'Contacts', 'make_frame']
