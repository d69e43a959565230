"""The one exception type for bad MJCF input."""

from __future__ import annotations


class MJCFError(ValueError):
  """Bad or unsupported MJCF input, located by file, line, element and attribute.

  Attributes:
    message: what is wrong, in words.
    file: path of the XML file, or "<string>" for a model given as a string.
    line: 1-based line of the offending element in that file (None if unknown).
    element: tag of the offending element (None for whole-document errors).
    attribute: name of the offending attribute, or None.
  """

  def __init__(self, message, file=None, line=None, element=None, attribute=None, name=None):
    self.message = message
    self.file = file
    self.line = line
    self.element = element
    self.attribute = attribute
    self.name = name
    super().__init__(self._format())

  def _format(self) -> str:
    # <file>:<line>: <element> ['name'] [attribute 'x']: message
    where = f'{self.file or "<string>"}:{self.line if self.line is not None else "?"}'
    parts = []
    if self.element:
      parts.append(self.element + (f" '{self.name}'" if self.name else ''))
    if self.attribute:
      parts.append(f"attribute '{self.attribute}'")
    what = ' '.join(parts)
    return f'{where}: {what}: {self.message}' if what else f'{where}: {self.message}'


class NotSupportedError(ValueError):
  """A model feature that the simulation pipeline does not implement yet.

  Raised when a stage is built (at trace time), never silently skipped: the message names the
  feature and how to switch it off in the model.
  """
