"""Collision detection (MuJoCo's mj_collision): candidate pairs, broadphase, narrowphase.

``driver.collision(m, d)`` is the stage (contacts into ``d.contact``/``d.ncon``);
``driver.pair_tables`` builds the host-side candidate pair tables and ``driver.capacity`` the
contact buffer size.

``primitive`` holds one pure function per MuJoCo primitive pair type; each collides ONE pair and
returns a fixed-size ``Contacts`` tuple (callers ``jax.vmap`` it over all pairs of that type).
``ROUTINES`` maps ``(type1, type2)`` (geom type ids, type1 <= type2) to ``(fn, ncon)``.
"""

from .driver import capacity, collision, pair_tables
from .primitive import ROUTINES, Contacts, make_frame

__all__ = ['ROUTINES', 'Contacts', 'capacity', 'collision', 'make_frame', 'pair_tables']
