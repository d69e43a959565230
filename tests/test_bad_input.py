"""Bad-input test suite for the MJCF compiler.

Every case is a malformed model. ``mjx_py.from_xml_string`` / ``from_xml_path`` must raise
``mjx_py.MJCFError`` (a ``ValueError``) that points at the offending element: its file, its
1-based line (like lxml's ``sourceline``), its tag and, where it is clear, the offending
attribute. No other exception type may escape.

``test_mujoco_also_rejects`` checks the same cases against the MuJoCo oracle, except the ones
marked ``oracle_rejects=False`` (features MuJoCo supports but mjx_py does not yet).

Line numbers: every XML string below starts directly with ``<mujoco>`` (or the bad root) on
line 1; ``test_case_line_points_at_element`` checks that each expected line really holds the
expected element, so the table itself stays honest.
"""

from __future__ import annotations

import dataclasses
import os
import textwrap

import mujoco
import pytest

import mjx_py

BAD_MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_models")


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    xml: str | None  # model text (dedented); None for file cases
    line: int  # expected 1-based line of the offending element in `file`
    msg: str | None = None  # loose, case-insensitive substring of str(e)
    element: str | None = None  # expected e.element (None: not checked)
    attribute: str | None = None  # expected e.attribute (None: not checked)
    oracle_rejects: bool = True  # False where MuJoCo accepts the model
    path: str | None = None  # model file under bad_models/ (use from_xml_path)
    file: str | None = None  # basename of the file the error must point at (file cases)


def _c(id, xml, line, msg=None, element=None, attribute=None, **kw):
    return Case(id, textwrap.dedent(xml), line, msg, element, attribute, **kw)


def _f(id, path, file, line, msg=None, element=None, attribute=None, **kw):
    return Case(id, None, line, msg, element, attribute, path=path, file=file, **kw)


CASES = [
    # ------------------------------------------------------------------ malformed XML
    _c(
        "xml_unclosed_tag",
        """\
        <mujoco>
          <worldbody>
            <body>
          </worldbody>
        </mujoco>
        """,
        4,
    ),
    _c(
        # no trailing newline: the parser hits end-of-data on line 3
        "xml_unclosed_root",
        "<mujoco>\n  <worldbody>\n  </worldbody>",
        3,
    ),
    _c("xml_garbage", "this is not xml at all\n", 1),
    _c("xml_empty", "", 1),
    _c(
        "xml_unquoted_attribute",
        """\
        <mujoco>
          <worldbody>
            <geom size=1/>
          </worldbody>
        </mujoco>
        """,
        3,
    ),
    _c(
        "xml_duplicate_attribute",
        """\
        <mujoco>
          <worldbody>
            <geom size="1" size="2"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="size",
    ),
    _c(
        "xml_two_roots",
        """\
        <mujoco>
        </mujoco>
        <mujoco>
        </mujoco>
        """,
        3,
        oracle_rejects=False,  # tinyxml2 ignores content after the root
    ),
    _c(
        "xml_bare_ampersand",
        """\
        <mujoco model="a & b">
        </mujoco>
        """,
        1,
        oracle_rejects=False,  # tinyxml2 takes a bare '&' literally
    ),
    # ------------------------------------------------------------------ root element
    _c(
        "root_misspelled",
        """\
        <mujoc>
          <worldbody/>
        </mujoc>
        """,
        1,
        msg="mujoc",
        element="mujoc",
    ),
    _c(
        "root_worldbody",
        """\
        <worldbody>
          <geom size="1"/>
        </worldbody>
        """,
        1,
        msg="worldbody",
        element="worldbody",
    ),
    # ------------------------------------------------------------------ unknown element
    _c(
        "unknown_element",
        """\
        <mujoco>
          <worldbody>
            <bodyy name="b"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="bodyy",
        element="bodyy",
    ),
    _c(
        "known_element_wrong_parent",
        """\
        <mujoco>
          <worldbody/>
          <geom size="1"/>
        </mujoco>
        """,
        3,
        msg="geom",
        element="geom",
    ),
    _c(
        "body_inside_default",
        """\
        <mujoco>
          <default>
            <body/>
          </default>
        </mujoco>
        """,
        3,
        msg="body",
        element="body",
    ),
    # ------------------------------------------------------------------ unknown attribute
    _c(
        "unknown_attribute_geom",
        """\
        <mujoco>
          <worldbody>
            <geom sizes="1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="sizes",
        element="geom",
        attribute="sizes",
    ),
    _c(
        "unknown_attribute_option",
        """\
        <mujoco>
          <option timestep2="0.01"/>
        </mujoco>
        """,
        2,
        msg="timestep2",
        element="option",
        attribute="timestep2",
    ),
    _c(
        "unknown_attribute_childclass_on_geom",
        """\
        <mujoco>
          <default>
            <default class="c"/>
          </default>
          <worldbody>
            <geom size="1" childclass="c"/>
          </worldbody>
        </mujoco>
        """,
        6,
        msg="childclass",
        element="geom",
        attribute="childclass",
    ),
    # ------------------------------------------------------------------ bad keyword
    _c(
        "keyword_geom_type",
        """\
        <mujoco>
          <worldbody>
            <geom type="sphre" size="1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="sphre",
        element="geom",
        attribute="type",
    ),
    _c(
        "keyword_integrator_lowercase",
        """\
        <mujoco>
          <option integrator="euler"/>
        </mujoco>
        """,
        2,
        msg="euler",
        element="option",
        attribute="integrator",
    ),
    _c(
        "keyword_joint_type",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint type="hindge"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        4,
        msg="hindge",
        element="joint",
        attribute="type",
    ),
    _c(
        "keyword_compiler_angle",
        """\
        <mujoco>
          <compiler angle="degrees"/>
        </mujoco>
        """,
        2,
        msg="degrees",
        element="compiler",
        attribute="angle",
    ),
    _c(
        "keyword_limited_yes",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint limited="yes" range="0 1"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        4,
        msg="yes",
        element="joint",
        attribute="limited",
    ),
    _c(
        "keyword_flag_value",
        """\
        <mujoco>
          <option>
            <flag contact="on"/>
          </option>
        </mujoco>
        """,
        3,
        msg="contact",
        element="flag",
        attribute="contact",
    ),
    _c(
        "keyword_cone",
        """\
        <mujoco>
          <option cone="circular"/>
        </mujoco>
        """,
        2,
        msg="cone",
        element="option",
        attribute="cone",
    ),
    _c(
        "keyword_camera_mode",
        """\
        <mujoco>
          <worldbody>
            <camera mode="tracker"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="tracker",
        element="camera",
        attribute="mode",
    ),
    # ------------------------------------------------------------------ array length
    _c(
        "array_pos_too_short",
        """\
        <mujoco>
          <worldbody>
            <geom pos="1 2" size="1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="pos",
        element="geom",
        attribute="pos",
    ),
    _c(
        "array_pos_too_long",
        """\
        <mujoco>
          <worldbody>
            <geom pos="1 2 3 4" size="1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="pos",
        element="geom",
        attribute="pos",
    ),
    _c(
        "array_quat_too_short",
        """\
        <mujoco>
          <worldbody>
            <body quat="1 0 0">
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="quat",
        element="body",
        attribute="quat",
    ),
    _c(
        "array_quat_too_long",
        """\
        <mujoco>
          <worldbody>
            <body quat="1 0 0 0 0">
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="quat",
        element="body",
        attribute="quat",
    ),
    _c(
        "array_gravity_too_short",
        """\
        <mujoco>
          <option gravity="0 -9.81"/>
        </mujoco>
        """,
        2,
        msg="gravity",
        element="option",
        attribute="gravity",
    ),
    _c(
        "array_rgba_too_short",
        """\
        <mujoco>
          <worldbody>
            <geom size="1" rgba="1 0 0"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="rgba",
        element="geom",
        attribute="rgba",
    ),
    _c(
        "array_geom_size_too_long",
        """\
        <mujoco>
          <worldbody>
            <geom type="box" size="1 1 1 1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="size",
        element="geom",
        attribute="size",
    ),
    _c(
        "array_friction_too_long",
        """\
        <mujoco>
          <worldbody>
            <geom size="1" friction="1 0.005 0.0001 7"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="friction",
        element="geom",
        attribute="friction",
    ),
    _c(
        "array_diaginertia_too_short",
        """\
        <mujoco>
          <worldbody>
            <body>
              <inertial pos="0 0 0" mass="1" diaginertia="1 1"/>
              <joint/>
            </body>
          </worldbody>
        </mujoco>
        """,
        4,
        msg="diaginertia",
        element="inertial",
        attribute="diaginertia",
    ),
    _c(
        "array_fromto_too_short",
        """\
        <mujoco>
          <worldbody>
            <geom type="capsule" size="0.1" fromto="0 0 0 1 1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="fromto",
        element="geom",
        attribute="fromto",
    ),
    _c(
        "array_joint_range_too_long",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint limited="true" range="0 1 2"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        4,
        msg="range",
        element="joint",
        attribute="range",
    ),
    _c(
        "array_gear_too_long",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <motor joint="j" gear="1 0 0 0 0 0 0"/>
          </actuator>
        </mujoco>
        """,
        9,
        msg="gear",
        element="motor",
        attribute="gear",
    ),
    # ------------------------------------------------------------------ unparsable number
    _c(
        "number_pos_letter",
        """\
        <mujoco>
          <worldbody>
            <geom pos="1 a 3" size="1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="pos",
        element="geom",
        attribute="pos",
    ),
    _c(
        "number_mass_word",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <geom size="1" mass="heavy"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="mass",
        element="geom",
        attribute="mass",
    ),
    _c(
        "number_timestep_two_dots",
        """\
        <mujoco>
          <option timestep="0.0.1"/>
        </mujoco>
        """,
        2,
        msg="timestep",
        element="option",
        attribute="timestep",
    ),
    _c(
        "number_condim_word",
        """\
        <mujoco>
          <worldbody>
            <geom size="1" condim="three"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="condim",
        element="geom",
        attribute="condim",
    ),
    _c(
        "number_int_attribute_float",
        """\
        <mujoco>
          <worldbody>
            <geom size="1" contype="1.5"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="contype",
        element="geom",
        attribute="contype",
    ),
    # ------------------------------------------------------------------ missing required attribute
    _c(
        "required_inertial_mass",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <inertial pos="0 0 0" diaginertia="1 1 1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="mass",
        element="inertial",
        attribute="mass",
    ),
    _c(
        "required_inertial_pos",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <inertial mass="1" diaginertia="1 1 1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="pos",
        element="inertial",
        attribute="pos",
    ),
    _c(
        "required_pair_geom2",
        """\
        <mujoco>
          <worldbody>
            <geom name="g1" size="1"/>
            <geom name="g2" size="1"/>
          </worldbody>
          <contact>
            <pair geom1="g1"/>
          </contact>
        </mujoco>
        """,
        7,
        msg="geom2",
        element="pair",
        attribute="geom2",
    ),
    _c(
        "required_exclude_body2",
        """\
        <mujoco>
          <worldbody>
            <body name="b">
              <joint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <contact>
            <exclude body1="b"/>
          </contact>
        </mujoco>
        """,
        9,
        msg="body2",
        element="exclude",
        attribute="body2",
    ),
    _c(
        "required_fixed_joint_coef",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <tendon>
            <fixed>
              <joint joint="j"/>
            </fixed>
          </tendon>
        </mujoco>
        """,
        10,
        msg="coef",
        element="joint",
        attribute="coef",
    ),
    _c(
        "required_fixed_joint_joint",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <tendon>
            <fixed>
              <joint coef="1"/>
            </fixed>
          </tendon>
        </mujoco>
        """,
        10,
        msg="joint",
        element="joint",
        attribute="joint",
    ),
    _c(
        "required_spatial_site",
        """\
        <mujoco>
          <worldbody>
            <site name="s0"/>
            <body>
              <joint/>
              <geom size="1"/>
              <site name="s1"/>
            </body>
          </worldbody>
          <tendon>
            <spatial>
              <site site="s0"/>
              <site/>
            </spatial>
          </tendon>
        </mujoco>
        """,
        13,
        msg="site",
        element="site",
        attribute="site",
    ),
    _c(
        "required_include_file",
        """\
        <mujoco>
          <include/>
        </mujoco>
        """,
        2,
        msg="file",
        element="include",
        attribute="file",
    ),
    _c(
        "required_sensor_joint",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <sensor>
            <jointpos/>
          </sensor>
        </mujoco>
        """,
        9,
        msg="joint",
        element="jointpos",
        attribute="joint",
    ),
    # ------------------------------------------------------------------ default classes
    _c(
        "undefined_class",
        """\
        <mujoco>
          <worldbody>
            <geom class="nope" size="1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="nope",
        element="geom",
        attribute="class",
    ),
    _c(
        "undefined_childclass",
        """\
        <mujoco>
          <worldbody>
            <body childclass="nope">
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="nope",
        element="body",
        attribute="childclass",
    ),
    _c(
        "undefined_class_on_actuator",
        """\
        <mujoco>
          <default>
            <default class="a"/>
          </default>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <motor joint="j" class="b"/>
          </actuator>
        </mujoco>
        """,
        12,
        msg="b",
        element="motor",
        attribute="class",
    ),
    _c(
        "default_top_level_not_main",
        """\
        <mujoco>
          <default class="other">
            <geom size="1"/>
          </default>
        </mujoco>
        """,
        2,
        msg="main",
        element="default",
    ),
    _c(
        "default_nested_without_class",
        """\
        <mujoco>
          <default>
            <default>
              <geom size="1"/>
            </default>
          </default>
        </mujoco>
        """,
        3,
        msg="class",
        element="default",
        attribute="class",
    ),
    _c(
        "default_duplicate_class",
        """\
        <mujoco>
          <default>
            <default class="a"/>
            <default class="a"/>
          </default>
        </mujoco>
        """,
        4,
        msg="a",
        element="default",
        attribute="class",
    ),
    # ------------------------------------------------------------------ bad references
    _c(
        "ref_motor_joint",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <motor joint="nope"/>
          </actuator>
        </mujoco>
        """,
        9,
        msg="nope",
        element="motor",
        attribute="joint",
    ),
    _c(
        "ref_motor_site",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <motor site="nope"/>
          </actuator>
        </mujoco>
        """,
        9,
        msg="nope",
        element="motor",
        attribute="site",
    ),
    _c(
        "ref_general_tendon",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <general tendon="nope"/>
          </actuator>
        </mujoco>
        """,
        9,
        msg="nope",
        element="general",
        attribute="tendon",
    ),
    _c(
        "ref_adhesion_body",
        """\
        <mujoco>
          <worldbody>
            <body name="b">
              <joint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <adhesion body="nope" ctrlrange="0 1"/>
          </actuator>
        </mujoco>
        """,
        9,
        msg="nope",
        element="adhesion",
        attribute="body",
    ),
    _c(
        "ref_sensor_joint",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <sensor>
            <jointpos joint="nope"/>
          </sensor>
        </mujoco>
        """,
        9,
        msg="nope",
        element="jointpos",
        attribute="joint",
    ),
    _c(
        "ref_sensor_missing_site",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <geom size="1"/>
              <site name="s"/>
            </body>
          </worldbody>
          <sensor>
            <touch site="nope"/>
          </sensor>
        </mujoco>
        """,
        10,
        msg="nope",
        element="touch",
        attribute="site",
    ),
    _c(
        "ref_sensor_framepos_body",
        """\
        <mujoco>
          <worldbody>
            <body name="b">
              <joint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <sensor>
            <framepos objtype="body" objname="nope"/>
          </sensor>
        </mujoco>
        """,
        9,
        msg="nope",
        element="framepos",
        attribute="objname",
    ),
    _c(
        "ref_sensor_actuator",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <motor name="m" joint="j"/>
          </actuator>
          <sensor>
            <actuatorfrc actuator="nope"/>
          </sensor>
        </mujoco>
        """,
        12,
        msg="nope",
        element="actuatorfrc",
        attribute="actuator",
    ),
    _c(
        "ref_connect_body",
        """\
        <mujoco>
          <worldbody>
            <body name="b">
              <freejoint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <equality>
            <connect body1="nope" anchor="0 0 0"/>
          </equality>
        </mujoco>
        """,
        9,
        msg="nope",
        element="connect",
        attribute="body1",
    ),
    _c(
        "ref_weld_body2",
        """\
        <mujoco>
          <worldbody>
            <body name="b">
              <freejoint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <equality>
            <weld body1="b" body2="nope"/>
          </equality>
        </mujoco>
        """,
        9,
        msg="nope",
        element="weld",
        attribute="body2",
    ),
    _c(
        "ref_weld_site",
        """\
        <mujoco>
          <worldbody>
            <site name="s0"/>
            <body>
              <freejoint/>
              <geom size="1"/>
              <site name="s1"/>
            </body>
          </worldbody>
          <equality>
            <weld site1="s1" site2="nope"/>
          </equality>
        </mujoco>
        """,
        11,
        msg="nope",
        element="weld",
        attribute="site2",
    ),
    _c(
        "ref_equality_joint",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <equality>
            <joint joint1="j" joint2="nope"/>
          </equality>
        </mujoco>
        """,
        9,
        msg="nope",
        element="joint",
        attribute="joint2",
    ),
    _c(
        "ref_equality_tendon",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <tendon>
            <fixed name="t">
              <joint joint="j" coef="1"/>
            </fixed>
          </tendon>
          <equality>
            <tendon tendon1="nope"/>
          </equality>
        </mujoco>
        """,
        14,
        msg="nope",
        element="tendon",
        attribute="tendon1",
    ),
    _c(
        "ref_pair_geom",
        """\
        <mujoco>
          <worldbody>
            <geom name="g1" size="1"/>
          </worldbody>
          <contact>
            <pair geom1="g1" geom2="nope"/>
          </contact>
        </mujoco>
        """,
        6,
        msg="nope",
        element="pair",
        attribute="geom2",
    ),
    _c(
        "ref_exclude_body",
        """\
        <mujoco>
          <worldbody>
            <body name="b">
              <joint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <contact>
            <exclude body1="nope" body2="b"/>
          </contact>
        </mujoco>
        """,
        9,
        msg="nope",
        element="exclude",
        attribute="body1",
    ),
    _c(
        "ref_spatial_tendon_site",
        """\
        <mujoco>
          <worldbody>
            <site name="s0"/>
            <body>
              <joint/>
              <geom size="1"/>
              <site name="s1"/>
            </body>
          </worldbody>
          <tendon>
            <spatial>
              <site site="s0"/>
              <site site="nope"/>
            </spatial>
          </tendon>
        </mujoco>
        """,
        13,
        msg="nope",
        element="site",
        attribute="site",
    ),
    _c(
        "ref_fixed_tendon_joint",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <tendon>
            <fixed>
              <joint joint="nope" coef="1"/>
            </fixed>
          </tendon>
        </mujoco>
        """,
        10,
        msg="nope",
        element="joint",
        attribute="joint",
    ),
    _c(
        "ref_spatial_tendon_geom",
        """\
        <mujoco>
          <worldbody>
            <site name="s0"/>
            <body>
              <joint/>
              <geom size="1"/>
              <site name="s1"/>
            </body>
          </worldbody>
          <tendon>
            <spatial>
              <site site="s0"/>
              <geom geom="nope"/>
              <site site="s1"/>
            </spatial>
          </tendon>
        </mujoco>
        """,
        13,
        msg="nope",
        element="geom",
        attribute="geom",
    ),
    # ------------------------------------------------------------------ duplicate names
    _c(
        "duplicate_joint_name",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="j",
        element="joint",
        attribute="name",
    ),
    _c(
        "duplicate_body_name",
        """\
        <mujoco>
          <worldbody>
            <body name="b">
              <geom size="1"/>
            </body>
            <body name="b">
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        6,
        msg="b",
        element="body",
        attribute="name",
    ),
    _c(
        "duplicate_geom_name",
        """\
        <mujoco>
          <worldbody>
            <geom name="g" size="1"/>
            <body>
              <geom name="g" size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="g",
        element="geom",
        attribute="name",
    ),
    # ------------------------------------------------------------------ mass / inertia
    _c(
        "inertial_negative_mass",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <inertial pos="0 0 0" mass="-1" diaginertia="1 1 1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="mass",
        element="inertial",
        attribute="mass",
    ),
    _c(
        "geom_negative_mass",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <geom size="1"/>
              <geom size="1" mass="-1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        6,
        msg="mass",
        element="geom",
        attribute="mass",
    ),
    _c(
        "geom_negative_density",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <geom size="1"/>
              <geom size="1" density="-1000"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        6,
        msg="density",
        element="geom",
        attribute="density",
    ),
    _c(
        "moving_body_zero_mass",
        """\
        <mujoco>
          <worldbody>
            <body name="b">
              <joint/>
            </body>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="mass",
        element="body",
    ),
    _c(
        "inertia_triangle_inequality",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <inertial pos="0 0 0" mass="1" diaginertia="1 1 3"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="inertia",
        element="inertial",
    ),
    _c(
        "fullinertia_and_diaginertia",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <inertial pos="0 0 0" mass="1" diaginertia="1 1 1" fullinertia="1 1 1 0 0 0"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="inertia",
        element="inertial",
    ),
    # ------------------------------------------------------------------ geometry / orientation
    _c(
        "sphere_zero_size",
        """\
        <mujoco>
          <worldbody>
            <geom type="sphere" size="0"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="size",
        element="geom",
        attribute="size",
    ),
    _c(
        "sphere_negative_size",
        """\
        <mujoco>
          <worldbody>
            <geom type="sphere" size="-1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="size",
        element="geom",
        attribute="size",
    ),
    _c(
        "capsule_missing_half_length",
        """\
        <mujoco>
          <worldbody>
            <geom type="capsule" size="0.1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="size",
        element="geom",
        attribute="size",
    ),
    _c(
        "box_too_few_sizes",
        """\
        <mujoco>
          <worldbody>
            <geom type="box" size="0.1 0.2"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="size",
        element="geom",
        attribute="size",
    ),
    _c(
        "quat_zero_norm",
        """\
        <mujoco>
          <worldbody>
            <body quat="0 0 0 0">
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="quat",
        element="body",
        attribute="quat",
    ),
    _c(
        "joint_axis_zero_norm",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint axis="0 0 0"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        4,
        msg="axis",
        element="joint",
        attribute="axis",
    ),
    _c(
        "axisangle_zero_axis",
        """\
        <mujoco>
          <worldbody>
            <body axisangle="0 0 0 1">
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="axisangle",
        element="body",
        attribute="axisangle",
    ),
    _c(
        "multiple_orientation_specifiers",
        """\
        <mujoco>
          <worldbody>
            <body quat="1 0 0 0" euler="0 0 1">
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="orientation",
        element="body",
    ),
    _c(
        "eulerseq_too_short",
        """\
        <mujoco>
          <compiler eulerseq="xy"/>
        </mujoco>
        """,
        2,
        msg="eulerseq",
        element="compiler",
        attribute="eulerseq",
    ),
    _c(
        "condim_two",
        """\
        <mujoco>
          <worldbody>
            <geom size="1" condim="2"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="condim",
        element="geom",
        attribute="condim",
    ),
    _c(
        "fromto_on_sphere",
        """\
        <mujoco>
          <worldbody>
            <geom type="sphere" size="0.1" fromto="0 0 0 1 0 0"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="fromto",
        element="geom",
        attribute="fromto",
    ),
    _c(
        "fromto_and_pos",
        """\
        <mujoco>
          <worldbody>
            <geom type="capsule" size="0.1" pos="1 0 0" fromto="0 0 0 1 0 0"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="fromto",
        element="geom",
    ),
    _c(
        "plane_in_moving_body",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <geom size="1"/>
              <geom type="plane" size="1 1 1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        6,
        msg="plane",
        element="geom",
    ),
    # ------------------------------------------------------------------ joints
    _c(
        "freejoint_not_top_level",
        """\
        <mujoco>
          <worldbody>
            <body>
              <geom size="1"/>
              <body>
                <freejoint/>
                <geom size="1"/>
              </body>
            </body>
          </worldbody>
        </mujoco>
        """,
        6,
        msg="free",
        element="freejoint",
    ),
    _c(
        "free_type_joint_not_top_level",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <geom size="1"/>
              <body>
                <joint type="free"/>
                <geom size="1"/>
              </body>
            </body>
          </worldbody>
        </mujoco>
        """,
        7,
        msg="free",
        element="joint",
    ),
    _c(
        # the hinge comes first, so the free joint is both "the later one" and "the free one"
        "free_joint_with_other_joint",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint type="hinge"/>
              <joint type="free"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="free",
        element="joint",
    ),
    _c(
        "joint_in_worldbody",
        """\
        <mujoco>
          <worldbody>
            <joint type="hinge"/>
            <geom size="1"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="joint",
        element="joint",
    ),
    _c(
        "freejoint_in_worldbody",
        """\
        <mujoco>
          <worldbody>
            <freejoint/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="freejoint",
        element="freejoint",
    ),
    _c(
        "joint_range_lo_equals_hi",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint limited="true" range="1 1"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        4,
        msg="range",
        element="joint",
        attribute="range",
    ),
    _c(
        "joint_range_lo_above_hi",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint limited="true" range="1 -1"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        4,
        msg="range",
        element="joint",
        attribute="range",
    ),
    _c(
        "ball_joint_range_lo_nonzero",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint type="ball" limited="true" range="0.5 1"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        4,
        msg="range",
        element="joint",
        attribute="range",
    ),
    _c(
        "autolimits_false_range_without_limited",
        """\
        <mujoco>
          <compiler autolimits="false"/>
          <worldbody>
            <body>
              <joint range="-1 1"/>
              <geom size="1"/>
            </body>
          </worldbody>
        </mujoco>
        """,
        5,
        msg="limited",
        element="joint",
    ),
    _c(
        "jointlimitpos_on_unlimited_joint",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <sensor>
            <jointlimitpos joint="j"/>
          </sensor>
        </mujoco>
        """,
        9,
        msg="j",
        element="jointlimitpos",
    ),
    # ------------------------------------------------------------------ actuators
    _c(
        "ctrlrange_lo_above_hi",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <motor joint="j" ctrllimited="true" ctrlrange="1 -1"/>
          </actuator>
        </mujoco>
        """,
        9,
        msg="ctrlrange",
        element="motor",
        attribute="ctrlrange",
    ),
    _c(
        "actuator_two_targets",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
              <site name="s"/>
            </body>
          </worldbody>
          <actuator>
            <motor joint="j" site="s"/>
          </actuator>
        </mujoco>
        """,
        10,
        msg="motor",
        element="motor",
    ),
    _c(
        "actuator_no_target",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <motor gear="2"/>
          </actuator>
        </mujoco>
        """,
        9,
        msg="motor",
        element="motor",
    ),
    _c(
        "position_kv_and_dampratio",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <position joint="j" kp="10" kv="1" dampratio="1"/>
          </actuator>
        </mujoco>
        """,
        9,
        msg="dampratio",
        element="position",
    ),
    # ------------------------------------------------------------------ structure
    _c(
        "worldbody_with_attributes",
        """\
        <mujoco>
          <worldbody pos="0 0 1">
            <geom size="1"/>
          </worldbody>
        </mujoco>
        """,
        2,
        msg="pos",
        element="worldbody",
        attribute="pos",
    ),
    _c(
        "option_flag_twice",
        """\
        <mujoco>
          <option>
            <flag gravity="disable"/>
            <flag contact="disable"/>
          </option>
        </mujoco>
        """,
        4,
        msg="flag",
        element="flag",
    ),
    _c(
        "keyframe_qpos_wrong_length",
        """\
        <mujoco>
          <worldbody>
            <body>
              <freejoint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <keyframe>
            <key qpos="0 0 0 1 0 0"/>
          </keyframe>
        </mujoco>
        """,
        9,
        msg="qpos",
        element="key",
        attribute="qpos",
    ),
    _c(
        "keyframe_ctrl_wrong_length",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <actuator>
            <motor joint="j"/>
          </actuator>
          <keyframe>
            <key ctrl="1 2"/>
          </keyframe>
        </mujoco>
        """,
        12,
        msg="ctrl",
        element="key",
        attribute="ctrl",
    ),
    _c(
        "connect_mixing_body_and_site",
        """\
        <mujoco>
          <worldbody>
            <site name="s0"/>
            <body name="b">
              <freejoint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <equality>
            <connect body1="b" site2="s0"/>
          </equality>
        </mujoco>
        """,
        10,
        msg="connect",
        element="connect",
    ),
    _c(
        "spatial_tendon_single_site",
        """\
        <mujoco>
          <worldbody>
            <site name="s0"/>
            <body>
              <joint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <tendon>
            <spatial>
              <site site="s0"/>
            </spatial>
          </tendon>
        </mujoco>
        """,
        10,
        msg="spatial",
        element="spatial",
    ),
    _c(
        "fixed_tendon_empty",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint name="j"/>
              <geom size="1"/>
            </body>
          </worldbody>
          <tendon>
            <fixed name="t"/>
          </tendon>
        </mujoco>
        """,
        9,
        msg="fixed",
        element="fixed",
    ),
    _c(
        "duplicate_keyframe_name",
        """\
        <mujoco>
          <worldbody>
            <body>
              <joint/>
              <geom size="1"/>
            </body>
          </worldbody>
          <keyframe>
            <key name="k"/>
            <key name="k"/>
          </keyframe>
        </mujoco>
        """,
        10,
        msg="k",
        element="key",
        attribute="name",
    ),
    # ------------------------------------------------------------------ unsupported features
    # MuJoCo accepts these; mjx_py must refuse them cleanly, naming the element.
    _c(
        # no mesh asset here, so the geom itself is the first unsupported thing
        "unsupported_geom_type_mesh",
        """\
        <mujoco>
          <worldbody>
            <geom type="mesh"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="mesh",
        element="geom",
        attribute="type",
    ),
    _c(
        "unsupported_flexcomp",
        """\
        <mujoco>
          <worldbody>
            <flexcomp name="f" type="grid" count="3 3 1" spacing="0.1 0.1 0.1" dim="2"/>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="not supported",
        element="flexcomp",
        oracle_rejects=False,
    ),
    _c(
        "unsupported_composite",
        """\
        <mujoco>
          <worldbody>
            <body>
              <composite type="cable" count="5 1 1" curve="s" size="1">
                <geom type="capsule" size="0.01"/>
              </composite>
            </body>
          </worldbody>
        </mujoco>
        """,
        4,
        msg="not supported",
        element="composite",
        oracle_rejects=False,
    ),
    _c(
        "unsupported_plugin",
        """\
        <mujoco>
          <extension>
            <plugin plugin="mujoco.pid"/>
          </extension>
        </mujoco>
        """,
        3,
        msg="not supported",
        element="plugin",
        oracle_rejects=False,
    ),
    _c(
        "unsupported_replicate",
        """\
        <mujoco>
          <worldbody>
            <replicate count="2" offset="1 0 0">
              <geom size="0.1"/>
            </replicate>
          </worldbody>
        </mujoco>
        """,
        3,
        msg="not supported",
        element="replicate",
        oracle_rejects=False,
    ),
    # ------------------------------------------------------------------ include (files)
    _f(
        "include_missing_file",
        "include_missing.xml",
        "include_missing.xml",
        3,
        msg="no_such_file.xml",
        element="include",
        attribute="file",
    ),
    _f(
        "include_malformed_file",
        "include_malformed.xml",
        "include_malformed_part.xml",
        5,
    ),
    _f(
        "include_bad_attribute_in_part",
        "include_bad_attr.xml",
        "include_bad_attr_part.xml",
        4,
        msg="colour",
        element="geom",
        attribute="colour",
    ),
    _f(
        "include_nested_missing_file",
        "include_nested.xml",
        "include_nested_part.xml",
        3,
        msg="missing_again.xml",
        element="include",
        attribute="file",
    ),
    _f(
        "include_recursive",
        "include_self.xml",
        "include_self.xml",
        2,
        msg="include_self.xml",
        element="include",
    ),
]

ORACLE_CASES = [c for c in CASES if c.oracle_rejects]


def _ids(cases):
    return [c.id for c in cases]


def _source(c: Case) -> str:
    if c.path is None:
        return c.xml
    with open(os.path.join(BAD_MODELS, c.file)) as f:
        return f.read()


def test_case_ids_unique():
    assert len(CASES) >= 50
    assert len(set(_ids(CASES))) == len(CASES)


@pytest.mark.parametrize("c", CASES, ids=_ids(CASES))
def test_case_line_points_at_element(c: Case):
    """Sanity check of the table: the expected line holds the expected element."""
    lines = _source(c).splitlines()
    assert c.line >= 1 and c.line <= max(len(lines), 1), (c.line, len(lines))
    if c.element is not None:
        assert f"<{c.element}" in lines[c.line - 1], (c.line, lines)


def test_mjcf_error_is_value_error():
    assert issubclass(mjx_py.MJCFError, ValueError)


@pytest.mark.parametrize("c", CASES, ids=_ids(CASES))
def test_bad_input(c: Case):
    with pytest.raises(mjx_py.MJCFError) as info:
        if c.path is not None:
            mjx_py.from_xml_path(os.path.join(BAD_MODELS, c.path))
        else:
            mjx_py.from_xml_string(c.xml)
    e = info.value
    text = str(e)
    assert isinstance(e, ValueError)

    if c.path is None:
        assert e.file in (None, "<string>"), text
        shown_file = "<string>"
    else:
        assert e.file is not None, text
        assert os.path.basename(e.file) == c.file, text
        shown_file = e.file

    assert e.line == c.line, text
    assert text.startswith(f"{shown_file}:{c.line}:"), text

    if c.element is not None:
        assert e.element == c.element, text
        assert text.startswith(f"{shown_file}:{c.line}: {c.element}"), text
    if c.attribute is not None:
        assert e.attribute == c.attribute, text
        assert f"attribute '{c.attribute}'" in text, text
    if c.msg is not None:
        assert c.msg.lower() in text.lower(), text


@pytest.mark.parametrize("c", ORACLE_CASES, ids=_ids(ORACLE_CASES))
def test_mujoco_also_rejects(c: Case):
    with pytest.raises(ValueError):
        if c.path is not None:
            mujoco.MjModel.from_xml_path(os.path.join(BAD_MODELS, c.path))
        else:
            mujoco.MjModel.from_xml_string(c.xml)


ORACLE_ACCEPTS = [c for c in CASES if not c.oracle_rejects]


@pytest.mark.parametrize("c", ORACLE_ACCEPTS, ids=_ids(ORACLE_ACCEPTS))
def test_mujoco_accepts_oracle_false_cases(c: Case):
    """The oracle_rejects=False cases really load in MuJoCo (so the flag is not stale)."""
    mujoco.MjModel.from_xml_string(c.xml)
