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
    where = f'{self.file or "<string>"}:{self.line if self.line is not None else "?"}'
    what = ''
    if self.element:
      what = f'<{self.element}'
      if self.name:
        what += f' name="{self.name}"'
      what += '>'
      if self.attribute:
        what += f' attribute \'{self.attribute}\''
      what += ': '
    elif self.attribute:
      what = f'attribute \'{self.attribute}\': '
    return f'{where}: {what}{self.message}'
