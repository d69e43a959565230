"""Reading MJCF text into a validated tree of :class:`Node` (host only: lxml, never jax).

Steps: a hardened lxml parse (no network, no DTD, no entity expansion), ``<include>`` expansion
(files resolved next to the main model first, then next to the including file, then in the
``assets`` dict), and a schema walk that checks every element and attribute against
:mod:`mjx_py.mjcf.schema` and converts attribute text into typed values. Every error is an
:class:`~mjx_py.errors.MJCFError` naming file, line, element and attribute.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from lxml import etree

from ..errors import MJCFError
from . import schema


@dataclass(eq=False)
class Node:
  """One MJCF element after include expansion.

  tag: element tag; kind: schema kind (context-qualified tag, see schema.py).
  raw: attribute text as written; vals: typed values of the attributes written explicitly
  (arrays as tuples, possibly shorter than the full length for partial attributes).
  file/line: where the element was written (for error messages).
  """

  tag: str
  raw: dict
  file: str
  line: int
  children: list = field(default_factory=list)
  kind: str = ''
  vals: dict = field(default_factory=dict)

  def error(self, message: str, attribute: str | None = None) -> MJCFError:
    return MJCFError(message, self.file, self.line, self.tag, attribute, self.raw.get('name'))

  def find(self, tag: str) -> list:
    return [c for c in self.children if c.tag == tag]


def _parser():
  return etree.XMLParser(
      resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False,
      remove_comments=True, remove_pis=True, huge_tree=False, remove_blank_text=True)


class Loader:
  """Parses the main file and its includes into Node trees."""

  def __init__(self, main_file: str, assets: dict | None):
    self.main_file = main_file
    self.main_dir = os.path.dirname(main_file) if main_file != '<string>' else ''
    self.assets = assets or {}
    self.included: set[str] = set()

  def parse_text(self, text, file: str) -> Node:
    if isinstance(text, str):
      text = text.encode('utf-8')
    try:
      root = etree.fromstring(text, _parser())
    except etree.XMLSyntaxError as e:
      line = e.lineno if e.lineno else None
      raise MJCFError(f'malformed XML: {e.msg}', file, line) from None
    except ValueError as e:  # e.g. bad encoding declaration
      raise MJCFError(f'malformed XML: {e}', file, None) from None
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
      raise MJCFError('entity declarations are not allowed in MJCF', file, 1)
    return self._convert(root, file)

  def _convert(self, el, file: str) -> Node:
    node = Node(str(el.tag), dict(el.attrib), file, el.sourceline or 0)
    for child in el:
      if not isinstance(child.tag, str):  # entities and the like: never expanded
        raise MJCFError('entities are not allowed in MJCF', file, child.sourceline)
      if child.tag == 'include':
        node.children.extend(self._include(child, file))
      else:
        node.children.append(self._convert(child, file))
    return node

  def _include(self, el, file: str) -> list:
    where = dict(file=file, line=el.sourceline, element='include')
    if len(el):
      raise MJCFError('include element cannot have children', **where)
    extra = set(el.attrib) - {'file'}
    if extra:
      raise MJCFError(f"unrecognized attribute: '{sorted(extra)[0]}'", **where,
                      attribute=sorted(extra)[0])
    name = el.get('file')
    if not name:
      raise MJCFError("required attribute missing: 'file'", **where, attribute='file')
    text, path = self._read(name, file, where)
    if path in self.included:
      raise MJCFError(f"file '{name}' already included", **where, attribute='file')
    self.included.add(path)
    sub = self.parse_text(text, path)
    if not sub.children:
      raise MJCFError(f"empty include file '{name}'", **where, attribute='file')
    return sub.children

  def _read(self, name: str, including: str, where: dict):
    """Finds an included file: main model dir, then including file's dir, then assets."""
    candidates = [name] if os.path.isabs(name) else []
    if not os.path.isabs(name):
      candidates.append(os.path.join(self.main_dir, name))
      if including != '<string>':
        candidates.append(os.path.join(os.path.dirname(including), name))
    for c in candidates:
      if os.path.isfile(c):
        try:
          with open(c, 'rb') as f:
            return f.read(), os.path.normpath(c)
        except OSError as e:
          raise MJCFError(f"could not read include file '{name}': {e}", **where,
                          attribute='file') from None
    if name in self.assets:
      return self.assets[name], name
    raise MJCFError(f"include file '{name}' not found", **where, attribute='file')


# ---------------------------------------------------------------------------------------------
# Schema walk and typed values.

def _parse_number(text: str, node: Node, attr: str, is_int: bool):
  try:
    if is_int:
      v = int(text, 10)
      if abs(v) > 2**31 - 1:
        raise node.error(f"number is too large in attribute '{attr}'", attr)
      return v
    v = float(text)
  except ValueError:
    raise node.error(f"bad format in attribute '{attr}': '{text}'", attr) from None
  if math.isinf(v) and 'inf' not in text.lower():
    raise node.error(f"number is too large in attribute '{attr}'", attr)
  return v


def convert_attr(node: Node, name: str, spec: schema.Attr, text: str):
  """Typed value of one attribute (tuple for arrays, scalar for single numbers)."""
  if spec.kind == 'str':
    return text
  if spec.kind == 'kw':
    value = text.strip()
    if value not in spec.choices:
      raise node.error(
          f"invalid keyword '{text}' in attribute '{name}' (valid: {', '.join(spec.choices)})",
          name)
    return value
  words = text.split()
  values = tuple(_parse_number(w, node, name, spec.kind == 'int') for w in words)
  if spec.n is None:
    return values
  if len(values) > spec.n:
    raise node.error(f"attribute '{name}' has too much data (expected {spec.n} values, "
                     f'got {len(values)})', name)
  if len(values) < spec.n and not (spec.partial and values):
    raise node.error(f"attribute '{name}' does not have enough data (expected {spec.n} "
                     f'values, got {len(values)})', name)
  if spec.n == 1:
    return values[0]
  return values


def validate(node: Node, kind: str):
  """Checks node (of schema kind ``kind``) and its subtree; fills ``kind`` and ``vals``."""
  node.kind = kind
  if kind in schema.UNSUPPORTED:
    raise node.error(f'{schema.UNSUPPORTED[kind]} are not supported yet by mjx_py')
  if kind == 'distance':
    raise node.error('support for distance equality constraints was removed in MuJoCo 2.2.2')
  attrs = schema.ATTRS.get(kind, {})
  for name, text in node.raw.items():
    if name.startswith('{'):
      raise node.error(f"unrecognized attribute: '{name}'", name)
    spec = attrs.get(name)
    if spec is None:
      raise node.error(f"unrecognized attribute: '{name}'", name)
    node.vals[name] = convert_attr(node, name, spec, text)
  for name, spec in attrs.items():
    if spec.required and name not in node.vals:
      raise node.error(f"required attribute missing: '{name}'", name)
  allowed = schema.CHILDREN.get(kind, {})
  counts: dict[str, int] = {}
  for child in node.children:
    entry = allowed.get(child.tag)
    if entry is None:
      raise child.error(f"unrecognized element '{child.tag}' inside <{node.tag}>")
    child_kind, mult = entry
    counts[child.tag] = counts.get(child.tag, 0) + 1
    if mult in '!?' and counts[child.tag] > 1:
      raise child.error(f"unique element '{child.tag}' found more than once in <{node.tag}>")
    validate(child, child_kind)
  for tag, (_, mult) in allowed.items():
    if mult == '!' and tag not in counts:
      raise node.error(f"required element '{tag}' is missing")


def load(text, file: str, assets: dict | None = None) -> Node:
  """Parses, expands includes and validates an MJCF document; returns the <mujoco> node."""
  loader = Loader(file, assets)
  root = loader.parse_text(text, file)
  if root.tag != 'mujoco':
    raise root.error(f"root element must be <mujoco>, found <{root.tag}>")
  validate(root, 'mujoco')
  return root
