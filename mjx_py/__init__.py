"""mjx_py: a MuJoCo-compatible physics engine written in JAX.

Public API (MuJoCo's names)::

  m = mjx_py.from_xml_path("models/humanoid.xml")   # or from_xml_string(xml, assets=None)
  d = mjx_py.make_data(m)                            # reset state at qpos0
  d = mjx_py.reset_data(m, key=0)                    # state stored in keyframe 0
  d = mjx_py.step(m, d)                              # mj_step (also mjx_py.forward)
  d, ys = mjx_py.rollout(m, d, ctrl, record=f)       # nstep steps in one lax.scan
  dist, geomid = mjx_py.ray(m, d, pnt, vec)          # mj_ray (vmap over rays)
  f = mjx_py.contact_force(m, d)                     # mj_contactForce of every contact
  axes = mjx_py.model_axes(m, ['body_mass'])         # vmap in_axes for per-world fields
  m = mjx_py.set_const(m, from_geoms=True)           # mj_setConst (+ masses from edited geoms)
  fit = mjx_py.fit_capacity(m)                       # nconmax / njmax from a probe rollout
  m = mjx_py.with_capacity(m, **fit.kwargs())       # ... the Model at those capacities
  d = mjx_py.shard_batch(d)                          # a batch of worlds across devices
  jax.jit(f, compiler_options=mjx_py.xla.compile_options())  # CPU: FAST_COMPILE where it exists
  mjx_py.enable_compile_cache()                      # reuse compiled programs across runs
"""

from __future__ import annotations

from . import mjcf, xla  # noqa: F401  (mjx_py.xla.compile_options, set_cpu_flags)
from .batch import batch_mesh, model_axes, replicate, shard_batch, shard_worlds
from .capacity import Capacity, CapacityError, fit_capacity, with_capacity
from .data import Data, make_data, reset_data
from .errors import MJCFError, NotSupportedError
from .forward import forward, step
from .massprops import inertia_from_geoms
from .model import Model, Option, Statistic, name2id, put_model
from .ray import ray
from .rollout import rollout
from .setconst import set_const
from .xla import FAST_COMPILE, enable_compile_cache


def contact_force(m: Model, d: Data):
  """MuJoCo's mj_contactForce for every contact slot at once: (nconmax, 6) normal force,
  two tangent forces, torsional and rolling torques in each contact's frame, decoded from the
  pyramid rows (pyramidal cones) or copied from the rows (elliptic, frictionless); 0 for unused
  slots and contacts without rows. Reads contact, ncon, efc_force after ``forward``."""
  from .sensor import contact_forces
  return contact_forces(m, d, d.efc_force)


def from_xml_string(xml: str, assets: dict | None = None, nconmax: int | None = None,
                    broadphase: str = 'auto', npairmax: int | None = None,
                    njmax: int | None = None) -> Model:
  """Compiles MJCF text into a Model. ``assets`` maps file names to contents (for includes);
  ``nconmax`` overrides the contact buffer's capacity, ``broadphase`` ('auto', 'table' or
  'sap') chooses the collision broadphase, ``npairmax`` caps the pairs of one geom type
  pair whose narrowphase runs and ``njmax`` the constraint rows (see ``put_model``)."""
  return put_model(mjcf.compile_string(xml, assets), nconmax=nconmax, broadphase=broadphase,
                   npairmax=npairmax, njmax=njmax)


def from_xml_path(path, assets: dict | None = None, nconmax: int | None = None,
                  broadphase: str = 'auto', npairmax: int | None = None,
                  njmax: int | None = None) -> Model:
  """Compiles an MJCF file into a Model (``nconmax``, ``broadphase``, ``npairmax``,
  ``njmax``: see ``from_xml_string``)."""
  return put_model(mjcf.compile_file(path, assets), nconmax=nconmax, broadphase=broadphase,
                   npairmax=npairmax, njmax=njmax)


__all__ = ['MJCFError', 'NotSupportedError', 'Model', 'Option', 'Statistic', 'Data',
           'from_xml_string', 'from_xml_path', 'make_data', 'reset_data', 'put_model', 'name2id',
           'forward', 'step', 'rollout', 'set_const', 'inertia_from_geoms', 'ray', 'contact_force',
           'model_axes', 'batch_mesh', 'shard_batch', 'shard_worlds', 'replicate', 'FAST_COMPILE',
           'enable_compile_cache', 'fit_capacity', 'with_capacity', 'Capacity',
           'CapacityError']
