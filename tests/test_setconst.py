"""set_const (numpy mj_setConst) against MuJoCo 3.3.3's compiled MjModel.

Each model is compiled by ``mujoco``.  ``set_const`` runs on that MjModel with the fields that
mj_setConst rewrites taken back from the MjSpec, i.e. as the compiler hands them over: dampratio
as a positive biasprm[2], the user's eq_data (anchor2 unset, zero weld relquat unless relpose is
given), springlength (-1, -1) where it must be computed.  Every returned field is compared by name
with the final MjModel field (statistics with any <statistic> override removed from the spec).
"""

from __future__ import annotations

import pathlib
import types

import numpy as np
import pytest

from mjx_py.mjcf import setconst

mujoco = pytest.importorskip("mujoco")

RTOL, ATOL = 1e-9, 1e-12

HUMANOID = """
<mujoco model="humanoidish">
  <default>
    <joint damping="0.1" armature="0.02"/>
    <geom type="capsule" size="0.05"/>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="0 0 1"/>
    <light name="sun" pos="0 0 3" dir="0 0.3 -1"/>
    <light name="spot" mode="targetbodycom" target="torso" pos="1 1 3" dir="0 0 -1"/>
    <camera name="world_cam" pos="2 -2 1.5" xyaxes="1 1 0 -0.3 0.3 1"/>
    <body name="torso" pos="0.1 -0.2 1.3" euler="5 10 -20">
      <freejoint name="root"/>
      <geom name="chest" fromto="0 -.07 0 0 .07 0" size="0.07"/>
      <geom name="head" type="sphere" pos="0 0 .19" size=".09"/>
      <site name="chest_site" pos="0.05 0 0.05" euler="0 20 10"/>
      <camera name="track" mode="track" pos="0 -2 0.5" xyaxes="1 0 0 0 0.3 1"/>
      <camera name="trackcom" mode="trackcom" pos="0 -2.5 0.5" xyaxes="1 0 0 0 0.3 1"/>
      <camera name="target" mode="targetbody" target="lower_arm" pos="1 0 0.5"/>
      <light name="follow" mode="track" pos="0 0 2" dir="0.2 0 -1"/>
      <body name="pelvis" pos="0 0 -0.3" euler="0 10 0">
        <joint name="abdomen_y" type="hinge" axis="0 1 0" pos="0 0 0.1" armature="0.05"/>
        <joint name="abdomen_x" type="hinge" axis="1 0 0" pos="0 0 0.1" ref="15"/>
        <geom name="butt" fromto="-.02 -.07 0 -.02 .07 0" size=".09"/>
        <body name="thigh" pos="0 -0.1 -0.04">
          <joint name="hip" type="ball" armature="0.01"/>
          <geom name="thigh" fromto="0 0 0 0 .01 -.34" size=".06"/>
          <body name="shin" pos="0 .01 -.4">
            <joint name="knee" type="hinge" axis="0 -1 0" pos="0 0 .02" springref="20"/>
            <geom name="shin" fromto="0 0 0 0 0 -.3" size=".049"/>
            <site name="foot" pos="0 0 -0.35" size="0.02"/>
          </body>
        </body>
      </body>
      <body name="upper_arm" pos="0 0.17 0.06" quat="0.9 0.1 0.2 0.3">
        <joint name="shoulder1" type="hinge" axis="2 1 1" range="-85 60"/>
        <joint name="shoulder2" type="hinge" axis="0 -1 1" range="-85 60"/>
        <geom name="upper_arm" fromto="0 0 0 .16 .16 -.16" size=".04"/>
        <body name="lower_arm" pos=".18 .18 -.18">
          <joint name="elbow" type="hinge" axis="0 -1 1" range="-90 50" stiffness="1"/>
          <geom name="lower_arm" fromto=".01 .01 .01 .17 .17 .17" size=".031"/>
          <inertial pos="0.08 0.08 0.08" mass="0.7"
                    fullinertia="0.02 0.025 0.03 0.001 0.002 0.003"/>
          <site name="hand" pos=".18 .18 .18" quat="0.7 0.7 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="m_abdomen" joint="abdomen_y" gear="40"/>
    <motor name="m_root" joint="root" gear="1 2 3 0.1 0.2 0.3"/>
    <general name="m_root_parent" jointinparent="root" gear="0 0 1 0.5 0 0"/>
    <motor name="m_hip" joint="hip" gear="1 2 3"/>
    <general name="m_hip_parent" jointinparent="hip" gear="3 -1 0.5"/>
    <position name="p_knee" joint="knee" kp="50" dampratio="1.2"/>
    <position name="p_elbow" joint="elbow" kp="30" dampratio="0.5" gear="2"/>
    <position name="p_shoulder" joint="shoulder1" kp="30" kv="3"/>
    <motor name="hand_site" site="hand" gear="1 0.5 0 0 0.3 1"/>
    <motor name="hand_ref" site="hand" refsite="chest_site" gear="1 2 0.5 0.4 0.1 0.7"/>
    <motor name="hand_ref_rot" site="hand" refsite="foot" gear="0 0 0 1 -0.5 0.2"/>
    <adhesion name="sticky" body="lower_arm" ctrlrange="0 1"/>
  </actuator>
</mujoco>
"""

CHAINS = """
<mujoco model="chains">
  <worldbody>
    <light name="dirlight" directional="true" pos="0 0 4" dir="0.1 0.1 -1"/>
    <body name="base" pos="0 0 1">
      <geom type="box" size="0.1 0.1 0.05"/>
      <body name="b1" pos="0 0 -0.1">
        <joint name="ball1" type="ball" pos="0 0 0.05"/>
        <geom type="capsule" fromto="0 0 0 0.05 0 -0.3" size="0.03"/>
        <body name="b2" pos="0.05 0 -0.35" euler="0 30 0">
          <joint name="ball2" type="ball" armature="0.1"/>
          <geom type="capsule" fromto="0 0 0 0 0.05 -0.3" size="0.03"/>
          <body name="b3" pos="0 0.05 -0.35">
            <joint name="slide_in_chain" type="slide" axis="0 0 1"/>
            <joint name="hinge_after_slide" type="hinge" axis="1 0 0"/>
            <geom type="ellipsoid" size="0.05 0.07 0.04"/>
            <site name="tip" pos="0 0 -0.05"/>
          </body>
        </body>
      </body>
    </body>
    <body name="cart" pos="1 0 0.5">
      <joint name="sx" type="slide" axis="1 0 0" armature="0.3"/>
      <joint name="sy" type="slide" axis="0 1 0"/>
      <joint name="sz" type="slide" axis="0 0 1"/>
      <geom type="box" size="0.1 0.1 0.1" mass="2"/>
    </body>
    <body name="tilted_cart" pos="1 1 0.5">
      <joint name="tilted" type="slide" axis="1 1 0"/>
      <geom type="sphere" size="0.1"/>
    </body>
    <body name="slider" pos="-1 0 0.5">
      <joint name="s1" type="slide" axis="0 0 1"/>
      <geom type="box" size="0.05 0.05 0.05"/>
      <body name="pend" pos="0 0 -0.1">
        <joint name="h1" type="hinge" axis="0 1 0" ref="30"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.4" size="0.02"/>
        <site name="pend_tip" pos="0 0 -0.4"/>
      </body>
    </body>
    <body name="mocap" mocap="true" pos="0.3 -0.5 0.8" euler="10 20 30">
      <geom type="box" size="0.05 0.05 0.05" contype="0" conaffinity="0"/>
      <camera name="mocap_cam" mode="trackcom" pos="0 0 1"/>
    </body>
    <body name="static" pos="0 -1 0.2">
      <geom type="sphere" size="0.1"/>
    </body>
  </worldbody>
  <equality>
    <connect name="c_bodies" body1="b3" body2="pend" anchor="0.01 0.02 -0.03"/>
    <connect name="c_world" body1="b2" anchor="0.1 0 0"/>
    <connect name="c_sites" site1="tip" site2="pend_tip"/>
    <weld name="w_plain" body1="cart" body2="b1"/>
    <weld name="w_anchor" body1="pend" body2="tilted_cart" anchor="0.1 0.2 0.3" torquescale="2"/>
    <weld name="w_relpose" body1="b3" body2="cart" relpose="0.1 0 0 1 1 0 0"/>
    <weld name="w_mocap" body1="mocap" body2="slider"/>
  </equality>
  <actuator>
    <position name="p_ball" joint="ball1" kp="10" dampratio="1"/>
    <position name="p_slide" joint="sx" kp="100" dampratio="0.7"/>
    <motor name="m_ball_parent" jointinparent="ball2" gear="1 0 1"/>
    <velocity name="v_h1" joint="h1" kv="3"/>
  </actuator>
</mujoco>
"""

TENDONS = """
<mujoco model="tendons">
  <worldbody>
    <site name="anchor" pos="0 0 1"/>
    <site name="anchor2" pos="0.3 0 1.05"/>
    <body name="arm" pos="0 0 1">
      <joint name="shoulder" type="hinge" axis="0 1 0" armature="0.01"/>
      <joint name="twist" type="hinge" axis="1 0 0"/>
      <geom name="upper" type="capsule" fromto="0 0 0 0.5 0 0" size="0.04"/>
      <geom name="ball" type="sphere" pos="0.25 0 0" size="0.06" contype="0" conaffinity="0"/>
      <geom name="elbow_cyl" type="cylinder" pos="0.5 0 0" euler="90 0 0" size="0.05 0.05"
            contype="0" conaffinity="0"/>
      <site name="s_up" pos="0.05 0 0.08"/>
      <site name="side_up" pos="0.25 0 0.2"/>
      <site name="side_in" pos="0.5 0 0.01"/>
      <site name="side_low" pos="0.5 0 -0.2"/>
      <body name="forearm" pos="0.5 0 0">
        <joint name="elbow" type="hinge" axis="0 1 0" ref="-40" springref="10"/>
        <geom name="fore" type="capsule" fromto="0 0 0 0.4 0 0" size="0.03"/>
        <site name="s_fore" pos="0.2 0 0.06"/>
        <site name="s_fore_low" pos="0.2 0 -0.06"/>
        <site name="s_hand" pos="0.4 0 0"/>
        <site name="crank" pos="0.3 0 0.02"/>
      </body>
    </body>
    <body name="slider" pos="0.6 0 0.5">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.04 0.04 0.04"/>
      <site name="slider_site" euler="0 90 0"/>
    </body>
  </worldbody>
  <tendon>
    <spatial name="sphere_wrap" springlength="-1 -1" stiffness="10">
      <site site="anchor"/>
      <geom geom="ball" sidesite="side_up"/>
      <site site="s_fore"/>
    </spatial>
    <spatial name="cyl_wrap" stiffness="5">
      <site site="s_up"/>
      <geom geom="elbow_cyl" sidesite="side_up"/>
      <site site="s_fore"/>
    </spatial>
    <spatial name="cyl_nowside" stiffness="1">
      <site site="anchor"/>
      <geom geom="elbow_cyl"/>
      <site site="s_fore_low"/>
    </spatial>
    <spatial name="sphere_inside">
      <site site="anchor"/>
      <geom geom="ball" sidesite="side_in"/>
      <site site="s_fore_low"/>
    </spatial>
    <spatial name="cyl_low_side">
      <site site="s_up"/>
      <geom geom="elbow_cyl" sidesite="side_low"/>
      <site site="s_fore_low"/>
    </spatial>
    <spatial name="sites_only" armature="0.1" springlength="-1">
      <site site="anchor2"/>
      <site site="s_fore_low"/>
      <site site="s_hand"/>
    </spatial>
    <spatial name="pulley" springlength="0.8">
      <site site="anchor"/>
      <site site="s_hand"/>
      <pulley divisor="2"/>
      <site site="anchor2"/>
      <site site="s_fore"/>
      <site site="s_hand"/>
    </spatial>
    <fixed name="fixed" springlength="0.1 0.3">
      <joint joint="shoulder" coef="1"/>
      <joint joint="elbow" coef="-0.5"/>
      <joint joint="slide" coef="2"/>
    </fixed>
    <fixed name="fixed_spring" stiffness="3" armature="0.2">
      <joint joint="elbow" coef="0.7"/>
      <joint joint="twist" coef="0.2"/>
    </fixed>
  </tendon>
  <actuator>
    <motor name="t_motor" tendon="sphere_wrap" gear="2"/>
    <position name="t_pos" tendon="fixed" kp="20" dampratio="0.8"/>
    <position name="t_pos_spatial" tendon="pulley" kp="5" dampratio="2"/>
    <muscle name="muscle" tendon="cyl_wrap" lengthrange="0.4 0.9"/>
    <general name="crank" cranksite="crank" slidersite="slider_site" cranklength="0.35"
             gear="1.5"/>
    <general name="crank_short" cranksite="crank" slidersite="slider_site" cranklength="0.01"/>
    <position name="p_crank" cranksite="crank" slidersite="slider_site" cranklength="0.35"
              kp="4" dampratio="0.3"/>
  </actuator>
</mujoco>
"""

STATIC = """
<mujoco model="static">
  <worldbody>
    <geom type="plane" size="2 3 0.1"/>
    <body name="b" pos="0 0 1"><geom type="sphere" size="0.1"/></body>
  </worldbody>
</mujoco>
"""

WORLD_ONLY = """
<mujoco>
  <worldbody>
    <site pos="1 2 3"/>
    <geom type="sphere" size="0.5" pos="0 0 1"/>
  </worldbody>
</mujoco>
"""

INLINE = {
  "humanoid": HUMANOID,
  "chains": CHAINS,
  "tendons": TENDONS,
  "static": STATIC,
  "world_only": WORLD_ONLY,
  "empty": "<mujoco/>",
}
REPO_MODELS = sorted((pathlib.Path(__file__).parents[1] / "models").glob("*.xml"))


class PreSetConst:
  """An MjModel seen through overrides: the fields as the compiler hands them to set_const."""

  def __init__(self, model, **overrides):
    self._model = model
    self._overrides = overrides

  def __getattr__(self, name):
    if name in self._overrides:
      return self._overrides[name]
    return getattr(self._model, name)


def pre_setconst(spec, model) -> PreSetConst:
  """The model with the fields setConst rewrites taken back from the spec (compiler output).

  The spec holds what the compiler copies into the model before mj_setConst: dampratio as a
  positive biasprm[2], the user's eq_data (zero relquat unless relpose is given), springlength
  (-1, -1) where it must be computed.  Element order in the spec is the model's id order.
  """
  assert len(spec.actuators) == model.nu and len(spec.equalities) == model.neq
  assert len(spec.tendons) == model.ntendon
  biasprm = np.array([a.biasprm for a in spec.actuators]).reshape(model.nu, 10)
  eq_data = np.array([e.data for e in spec.equalities]).reshape(model.neq, 11)
  lengthspring = np.array([t.springlength for t in spec.tendons]).reshape(model.ntendon, 2)
  return PreSetConst(
    model, actuator_biasprm=biasprm, eq_data=eq_data, tendon_lengthspring=lengthspring
  )


def _expected(model, key):
  if key.startswith("stat_"):
    return np.asarray(getattr(model.stat, key[5:]))
  return np.asarray(getattr(model, key))


MODELS = [pytest.param(("xml", xml), id=f"inline_{name}") for name, xml in INLINE.items()] + [
  pytest.param(("path", str(p)), id=p.stem) for p in REPO_MODELS
]


@pytest.fixture(scope="module", params=MODELS)
def compiled(request):
  kind, src = request.param
  spec = mujoco.MjSpec.from_string(src) if kind == "xml" else mujoco.MjSpec.from_file(src)
  # drop <statistic> overrides (applying them is the compiler's job): MuJoCo computes them all
  spec.stat.center = [np.nan, 0.0, 0.0]
  spec.stat.extent = spec.stat.meaninertia = spec.stat.meanmass = spec.stat.meansize = np.nan
  model = spec.compile()
  return model, setconst.set_const(pre_setconst(spec, model))


FIELDS = """
  dof_M0 dof_invweight0 body_invweight0 body_subtreemass tendon_length0 tendon_invweight0
  tendon_lengthspring actuator_length0 actuator_acc0 actuator_biasprm eq_data cam_pos0 cam_mat0
  cam_poscom0 light_pos0 light_dir0 light_poscom0 stat_meaninertia stat_meanmass stat_meansize
  stat_extent stat_center
""".split()


@pytest.mark.parametrize("key", FIELDS)
def test_field_matches_mujoco(compiled, key):
  model, out = compiled
  want = _expected(model, key)
  got = out[key]
  assert got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=key)


def test_all_keys_present(compiled):
  _, out = compiled
  assert set(FIELDS) <= set(out)


def test_plain_mjmodel_is_a_fixed_point(compiled):
  """On the final MjModel (markers already consumed) set_const reproduces it unchanged."""
  model, _ = compiled
  out = setconst.set_const(model)
  for key in ("actuator_biasprm", "eq_data", "tendon_lengthspring", "dof_M0"):
    np.testing.assert_allclose(out[key], _expected(model, key), rtol=RTOL, atol=ATOL)


def test_kinematics_and_mass_matrix(compiled):
  """The numpy building blocks agree with mj_forward at qpos0 and at random poses."""
  model, _ = compiled
  data = mujoco.MjData(model)
  rng = np.random.default_rng(0)
  tree = setconst.make_tree(model)
  poses = [model.qpos0] + [model.qpos0 + 0.5 * rng.standard_normal(model.nq) for _ in range(4)]
  for qpos in poses:
    data.qpos[:] = qpos
    mujoco.mj_forward(model, data)
    kin = setconst.kinematics(model, qpos, tree)
    for name in "xpos xquat xipos xanchor xaxis geom_xpos site_xpos subtree_com cdof".split():
      np.testing.assert_allclose(
        getattr(kin, name), getattr(data, name), rtol=RTOL, atol=1e-10, err_msg=name
      )
    np.testing.assert_allclose(kin.xmat.reshape(-1, 9), data.xmat, atol=1e-10)
    np.testing.assert_allclose(kin.site_xmat.reshape(-1, 9), data.site_xmat, atol=1e-10)
    ten_length, ten_J = setconst.tendon(model, tree, kin)
    np.testing.assert_allclose(ten_length, data.ten_length, rtol=RTOL, atol=1e-10)
    np.testing.assert_allclose(
      ten_J, data.ten_J.reshape(model.ntendon, model.nv), rtol=1e-8, atol=1e-10
    )
    qm = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, qm, data.qM)
    np.testing.assert_allclose(
      setconst.mass_matrix(model, tree, kin, ten_J), qm, rtol=RTOL, atol=1e-10
    )
    length, moment = setconst.transmission(model, tree, kin, ten_length, ten_J)
    dense = np.zeros((model.nu, model.nv))
    mujoco.mju_sparse2dense(
      dense, data.actuator_moment, data.moment_rownnz, data.moment_rowadr, data.moment_colind
    )
    np.testing.assert_allclose(length, data.actuator_length, rtol=RTOL, atol=1e-10)
    np.testing.assert_allclose(moment, dense, rtol=1e-8, atol=1e-10)


# every field set_const reads (hfield models also need geom_dataid and hfield_size)
INPUT_FIELDS = """
  actuator_biasprm actuator_cranklength actuator_gainprm actuator_gear actuator_trnid
  actuator_trntype body_inertia body_ipos body_iquat body_mass body_parentid body_pos body_quat
  cam_bodyid cam_pos cam_quat cam_targetbodyid dof_armature dof_bodyid eq_data eq_obj1id
  eq_obj2id eq_objtype eq_type geom_bodyid geom_pos geom_quat geom_rbound geom_size geom_type
  jnt_axis jnt_bodyid jnt_dofadr jnt_pos jnt_qposadr jnt_type light_bodyid light_dir light_pos
  light_targetbodyid qpos0 qpos_spring site_bodyid site_pos site_quat tendon_adr tendon_armature
  tendon_lengthspring tendon_num wrap_objid wrap_prm wrap_type
""".split()


def test_plain_arrays_input_and_no_mutation():
  """Plain numpy arrays (no MjModel) give the same result, and inputs are left untouched."""
  spec = mujoco.MjSpec.from_string(TENDONS)
  model = spec.compile()
  pre = pre_setconst(spec, model)
  arrays = {name: np.array(getattr(pre, name)) for name in INPUT_FIELDS}
  frozen = {name: a.copy() for name, a in arrays.items()}
  for a in arrays.values():
    a.flags.writeable = False
  out = setconst.set_const(types.SimpleNamespace(**arrays))
  want = setconst.set_const(pre)
  assert set(out) == set(want)
  for key in out:
    np.testing.assert_array_equal(out[key], want[key], err_msg=key)
  for name in INPUT_FIELDS:
    np.testing.assert_array_equal(arrays[name], frozen[name], err_msg=name)


def test_body_simple(compiled):
  model, _ = compiled
  np.testing.assert_array_equal(setconst.body_simple(model), model.body_simple)
