"""Reading, querying and writing INI configuration files.

The file format::

    # a full-line comment
    [server]
    host = 0.0.0.0
    port: 8080            ; an inline comment
    motd = "  Welcome!  " # quotes keep surrounding spaces
    banner =
        first line
        second line

    [paths]
    root = /srv/app
    logs = ${root}/logs              # same section
    cache = ${server:host}/cache     # another section
    home = ${env:HOME}               # an environment variable

Values in the DEFAULT section are visible in every other section.
"""

import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


class ConfigError(Exception):
    """Base class of every error raised by iniconf."""


class ParseError(ConfigError):
    """The text is not a valid configuration; carries the source name and line number."""

    def __init__(self, message, source="<string>", lineno=None, line=None):
        where = f"{source}, line {lineno}" if lineno is not None else source
        super().__init__(f"{where}: {message}" + (f"\n    {line.rstrip()}" if line else ""))
        self.source = source
        self.lineno = lineno
        self.line = line


class DuplicateSectionError(ParseError):
    pass


class DuplicateOptionError(ParseError):
    pass


class NoSectionError(ConfigError, KeyError):
    def __init__(self, section):
        super().__init__(f"no section {section!r}")
        self.section = section

    def __str__(self):
        return self.args[0]


class NoOptionError(ConfigError, KeyError):
    def __init__(self, section, option):
        super().__init__(f"no option {option!r} in section {section!r}")
        self.section = section
        self.option = option

    def __str__(self):
        return self.args[0]


class InterpolationError(ConfigError):
    def __init__(self, section, option, message):
        super().__init__(f"[{section}] {option}: {message}")
        self.section = section
        self.option = option


# ---------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------

_MISSING = object()

BOOLEAN_STATES = {
    "1": True,
    "yes": True,
    "true": True,
    "on": True,
    "enabled": True,
    "0": False,
    "no": False,
    "false": False,
    "off": False,
    "disabled": False,
}

_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)")
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-zA-Z]*)$")
_SECTION_RE = re.compile(r"^\[(?P<name>[^\]]+)\]\s*$")
_INTERPOLATION_RE = re.compile(r"\$\{([^}]*)\}")
_QUOTES = ("'", '"')


@dataclass
class ParserOptions:
    """How text is turned into sections and options."""

    delimiters: tuple = ("=", ":")
    comment_prefixes: tuple = ("#", ";")
    inline_comment_prefixes: tuple = ("#", ";")
    default_section: str = "DEFAULT"
    case_sensitive: bool = False
    strict: bool = True  # duplicate sections / options are errors
    interpolation: bool = True
    max_interpolation_depth: int = 10
    empty_lines_in_values: bool = True
    strip_quotes: bool = True
    list_separators: tuple = (",", "\n")
    environ: dict = field(default_factory=lambda: os.environ)


# ---------------------------------------------------------------------------
# parsing
# ---------------------------------------------------------------------------


class _RawOption:
    """An option while it is being read: its lines and where it started."""

    __slots__ = ("name", "lines", "lineno", "quoted")

    def __init__(self, name, first, lineno):
        self.name = name
        self.lines = [first]
        self.lineno = lineno
        self.quoted = False

    def value(self):
        lines = list(self.lines)
        while lines and not lines[-1].strip():
            lines.pop()
        return "\n".join(line.strip() if i else line for i, line in enumerate(lines))


class _Reader:
    """Turns the lines of one source into {section: {option: value}} plus line numbers."""

    def __init__(self, options, source):
        self.options = options
        self.source = source
        self.sections = OrderedDict()
        self.linenos = {}
        self._section = None
        self._option = None
        self._indent = 0

    def optionxform(self, name):
        name = name.strip()
        return name if self.options.case_sensitive else name.lower()

    def read(self, lines):
        for lineno, line in enumerate(lines, start=1):
            self._read_line(line.rstrip("\r\n"), lineno)
        self._finish_option()
        return self.sections

    def _read_line(self, line, lineno):
        stripped = line.strip()
        if self._is_comment(stripped):
            return
        indent = len(line) - len(line.lstrip())
        if not stripped:
            if self._option is not None and self.options.empty_lines_in_values:
                self._option.lines.append("")
            else:
                self._finish_option()
            return
        if self._option is not None and indent > self._indent:
            self._option.lines.append(self._strip_inline_comment(stripped))
            return
        self._finish_option()
        match = _SECTION_RE.match(stripped)
        if match:
            self._start_section(match.group("name").strip(), lineno, line)
            return
        if self._section is None:
            raise ParseError("option before the first section header", self.source, lineno, line)
        self._start_option(stripped, indent, lineno, line)

    def _is_comment(self, stripped):
        return any(stripped.startswith(prefix) for prefix in self.options.comment_prefixes)

    def _start_section(self, name, lineno, line):
        if name in self.sections:
            if self.options.strict:
                raise DuplicateSectionError(f"section {name!r} already exists", self.source, lineno, line)
        else:
            self.sections[name] = OrderedDict()
            self.linenos[name] = {"__section__": lineno}
        self._section = name

    def _split_option(self, stripped):
        """'key = value' -> ('key', 'value'); the first delimiter wins."""
        positions = [(stripped.find(d), d) for d in self.options.delimiters if d in stripped]
        if not positions:
            return stripped, None
        pos, delim = min(positions)
        return stripped[:pos], stripped[pos + len(delim) :]

    def _start_option(self, stripped, indent, lineno, line):
        name, value = self._split_option(stripped)
        name = self.optionxform(name)
        if not name:
            raise ParseError("option without a name", self.source, lineno, line)
        if value is None:
            raise ParseError(f"option {name!r} has no value (expected one of {self.options.delimiters})",
                             self.source, lineno, line)
        section = self.sections[self._section]
        if name in section and self.options.strict:
            raise DuplicateOptionError(
                f"option {name!r} in section {self._section!r} already exists", self.source, lineno, line
            )
        self._option = _RawOption(name, self._strip_inline_comment(value.strip()), lineno)
        self._indent = indent

    def _finish_option(self):
        if self._option is None:
            return
        value = self._option.value()
        if self.options.strip_quotes:
            value = _unquote(value)
        self.sections[self._section][self._option.name] = value
        self.linenos[self._section][self._option.name] = self._option.lineno
        self._option = None

    def _strip_inline_comment(self, value):
        """Drop an inline comment: a comment prefix preceded by whitespace, outside quotes."""
        if not self.options.inline_comment_prefixes:
            return value
        quote = None
        for i, ch in enumerate(value):
            if ch in _QUOTES:
                quote = None if quote == ch else (quote or ch)
            elif ch in self.options.inline_comment_prefixes and (i == 0 or value[i - 1].isspace()):
                return value[:i].rstrip()
        return value


def _unquote(value):
    """Remove one pair of matching quotes around a whole value."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in _QUOTES:
        return value[1:-1]
    return value


def _needs_quotes(value):
    return value != value.strip() or any(ch in value for ch in "#;") or value[:1] in _QUOTES


# ---------------------------------------------------------------------------
# conversions
# ---------------------------------------------------------------------------


def to_bool(value):
    try:
        return BOOLEAN_STATES[value.strip().lower()]
    except KeyError:
        raise ValueError(f"not a boolean: {value!r}") from None


def to_list(value, separators=(",", "\n")):
    """Split on any of the separators; surrounding whitespace and empty items are dropped."""
    items = [value]
    for sep in separators:
        items = [part for item in items for part in item.split(sep)]
    return [item.strip() for item in items if item.strip()]


def to_duration(value):
    """'1h30m', '45s', '250ms', '2d' or a plain number of seconds -> float seconds."""
    text = value.strip().lower().replace(" ", "")
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {value!r}")
    return total


def to_size(value):
    """'512', '10KB', '1.5GiB' -> int bytes (KB = 1000, KiB = 1024)."""
    match = _SIZE_RE.match(value.strip())
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {value!r}")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


# ---------------------------------------------------------------------------
# the configuration
# ---------------------------------------------------------------------------


class Config:
    """Sections of options, read from one or more sources (later ones override earlier ones)."""

    def __init__(self, options=None):
        self.options = options or ParserOptions()
        self._sections = OrderedDict()
        self._defaults = OrderedDict()
        self._linenos = {}
        self.sources = []

    # -- construction -------------------------------------------------------

    @classmethod
    def from_string(cls, text, source="<string>", options=None):
        config = cls(options)
        config.read_string(text, source)
        return config

    @classmethod
    def from_file(cls, path, options=None, encoding="utf-8"):
        config = cls(options)
        config.read_file(path, encoding)
        return config

    def read_string(self, text, source="<string>"):
        reader = _Reader(self.options, source)
        sections = reader.read(text.splitlines())
        self._merge(sections, reader.linenos, source)
        return self

    def read_file(self, path, encoding="utf-8"):
        with open(path, encoding=encoding) as handle:
            return self.read_string(handle.read(), source=str(path))

    def read_dict(self, data, source="<dict>"):
        """Merge {section: {option: value}}; values are converted with str()."""
        sections = OrderedDict()
        for section, values in data.items():
            sections[str(section)] = OrderedDict(
                (self._optionxform(str(k)), "" if v is None else str(v)) for k, v in values.items()
            )
        self._merge(sections, {}, source)
        return self

    def _merge(self, sections, linenos, source):
        for name, values in sections.items():
            if name == self.options.default_section:
                self._defaults.update(values)
                continue
            self._sections.setdefault(name, OrderedDict()).update(values)
            for option, lineno in linenos.get(name, {}).items():
                self._linenos[(name, option)] = (source, lineno)
        self.sources.append(source)

    def _optionxform(self, name):
        return name if self.options.case_sensitive else name.lower()

    # -- structure ----------------------------------------------------------

    def sections(self):
        return list(self._sections)

    def has_section(self, section):
        return section in self._sections

    def add_section(self, section):
        if section == self.options.default_section:
            raise ValueError(f"cannot add the default section {section!r}")
        if section in self._sections:
            raise DuplicateSectionError(f"section {section!r} already exists")
        self._sections[section] = OrderedDict()

    def remove_section(self, section):
        return self._sections.pop(section, None) is not None

    def defaults(self):
        return OrderedDict(self._defaults)

    def options_of(self, section):
        """Option names of a section, the defaults included."""
        values = self._section(section)
        return list(OrderedDict.fromkeys(list(values) + list(self._defaults)))

    def has_option(self, section, option):
        option = self._optionxform(option)
        if section == self.options.default_section:
            return option in self._defaults
        return section in self._sections and (option in self._sections[section] or option in self._defaults)

    def where(self, section, option):
        """(source, line number) an option was read from, or None."""
        return self._linenos.get((section, self._optionxform(option)))

    def _section(self, section):
        if section == self.options.default_section:
            return self._defaults
        try:
            return self._sections[section]
        except KeyError:
            raise NoSectionError(section) from None

    # -- values -------------------------------------------------------------

    def get_raw(self, section, option, fallback=_MISSING):
        """The value as written, before interpolation."""
        option = self._optionxform(option)
        values = self._section(section)
        if option in values:
            return values[option]
        if option in self._defaults:
            return self._defaults[option]
        if fallback is not _MISSING:
            return fallback
        raise NoOptionError(section, option)

    def get(self, section, option, fallback=_MISSING, raw=False):
        try:
            value = self.get_raw(section, option)
        except NoOptionError:
            if fallback is _MISSING:
                raise
            return fallback
        if raw or not self.options.interpolation:
            return value
        return self._interpolate(section, option, value, depth=0, seen=())

    def set(self, section, option, value):
        self._section(section)[self._optionxform(option)] = "" if value is None else str(value)

    def remove_option(self, section, option):
        return self._section(section).pop(self._optionxform(option), None) is not None

    def _typed(self, convert, section, option, fallback, type_name):
        try:
            value = self.get(section, option)
        except NoOptionError:
            if fallback is _MISSING:
                raise
            return fallback
        try:
            return convert(value)
        except ValueError as exc:
            where = self.where(section, option)
            location = f" ({where[0]}, line {where[1]})" if where else ""
            raise ConfigError(f"[{section}] {option}{location}: expected {type_name}: {exc}") from None

    def getint(self, section, option, fallback=_MISSING):
        return self._typed(int, section, option, fallback, "an integer")

    def getfloat(self, section, option, fallback=_MISSING):
        return self._typed(float, section, option, fallback, "a number")

    def getboolean(self, section, option, fallback=_MISSING):
        return self._typed(to_bool, section, option, fallback, "a boolean")

    def getlist(self, section, option, fallback=_MISSING):
        return self._typed(lambda v: to_list(v, self.options.list_separators), section, option, fallback, "a list")

    def getduration(self, section, option, fallback=_MISSING):
        return self._typed(to_duration, section, option, fallback, "a duration")

    def getsize(self, section, option, fallback=_MISSING):
        return self._typed(to_size, section, option, fallback, "a size")

    def items(self, section, raw=False):
        return [(name, self.get(section, name, raw=raw)) for name in self.options_of(section)]

    def as_dict(self, raw=False):
        return OrderedDict((name, OrderedDict(self.items(name, raw=raw))) for name in self._sections)

    # -- interpolation ------------------------------------------------------

    def _interpolate(self, section, option, value, depth, seen):
        if "$" not in value:
            return value
        if depth > self.options.max_interpolation_depth:
            raise InterpolationError(section, option, "interpolation too deeply nested")
        parts, pos = [], 0
        for match in _INTERPOLATION_RE.finditer(value):
            start = match.start()
            if start > 0 and value[start - 1] == "$":  # '$${x}' is a literal '${x}'
                parts.append(value[pos : start - 1] + match.group(0))
                pos = match.end()
                continue
            parts.append(value[pos:start])
            parts.append(self._lookup(section, option, match.group(1).strip(), depth, seen))
            pos = match.end()
        parts.append(value[pos:])
        return "".join(parts)

    def _lookup(self, section, option, reference, depth, seen):
        if not reference:
            raise InterpolationError(section, option, "empty reference ${}")
        ref_section, sep, ref_option = reference.rpartition(":")
        if not sep:
            ref_section = section
        if ref_section == "env":
            try:
                return self.options.environ[ref_option]
            except KeyError:
                raise InterpolationError(section, option, f"environment variable {ref_option!r} is not set") from None
        ref_option = self._optionxform(ref_option)
        key = (ref_section, ref_option)
        if key in seen or key == (section, self._optionxform(option)):
            raise InterpolationError(section, option, f"reference cycle through ${{{reference}}}")
        try:
            raw = self.get_raw(ref_section, ref_option)
        except (NoSectionError, NoOptionError) as exc:
            raise InterpolationError(section, option, f"bad reference ${{{reference}}}: {exc}") from None
        return self._interpolate(ref_section, ref_option, raw, depth + 1, seen + ((section, option), key))

    # -- mapping access -----------------------------------------------------

    def __getitem__(self, section):
        self._section(section)
        return SectionProxy(self, section)

    def __contains__(self, section):
        return section in self._sections or section == self.options.default_section

    def __iter__(self):
        return iter(self._sections)

    def __len__(self):
        return len(self._sections)

    # -- writing ------------------------------------------------------------

    def write(self, stream, space_around_delimiters=True):
        stream.write(self.dumps(space_around_delimiters))

    def dumps(self, space_around_delimiters=True):
        delim = " = " if space_around_delimiters else "="
        chunks = []
        if self._defaults:
            chunks.append(_dump_section(self.options.default_section, self._defaults, delim))
        for name, values in self._sections.items():
            chunks.append(_dump_section(name, values, delim))
        return "\n".join(chunks)


def _dump_section(name, values, delim):
    lines = [f"[{name}]"]
    for option, value in values.items():
        if "\n" in value:
            first, *rest = value.split("\n")
            lines.append(f"{option}{delim}{first}".rstrip())
            lines.extend(f"    {line}" if line else "" for line in rest)
        elif _needs_quotes(value):
            quote = "'" if '"' in value else '"'
            lines.append(f"{option}{delim}{quote}{value}{quote}")
        else:
            lines.append(f"{option}{delim}{value}".rstrip())
    return "\n".join(lines) + "\n"


class SectionProxy:
    """cfg["server"]: a live, dict-like view of one section."""

    def __init__(self, config, name):
        self._config = config
        self.name = name

    def __repr__(self):
        return f"<Section: {self.name}>"

    def __getitem__(self, option):
        return self._config.get(self.name, option)

    def __setitem__(self, option, value):
        self._config.set(self.name, option, value)

    def __delitem__(self, option):
        if not self._config.remove_option(self.name, option):
            raise NoOptionError(self.name, option)

    def __contains__(self, option):
        return self._config.has_option(self.name, option)

    def __iter__(self):
        return iter(self._config.options_of(self.name))

    def __len__(self):
        return len(self._config.options_of(self.name))

    def get(self, option, fallback=None, raw=False):
        return self._config.get(self.name, option, fallback=fallback, raw=raw)

    def keys(self):
        return list(self)

    def items(self):
        return self._config.items(self.name)

    def getint(self, option, fallback=_MISSING):
        return self._config.getint(self.name, option, fallback)

    def getfloat(self, option, fallback=_MISSING):
        return self._config.getfloat(self.name, option, fallback)

    def getboolean(self, option, fallback=_MISSING):
        return self._config.getboolean(self.name, option, fallback)

    def getlist(self, option, fallback=_MISSING):
        return self._config.getlist(self.name, option, fallback)

    def getduration(self, option, fallback=_MISSING):
        return self._config.getduration(self.name, option, fallback)

    def getsize(self, option, fallback=_MISSING):
        return self._config.getsize(self.name, option, fallback)


# ---------------------------------------------------------------------------
# module-level shortcuts
# ---------------------------------------------------------------------------


def loads(text, **options):
    """Parse text into a Config; keyword arguments set ParserOptions fields."""
    return Config.from_string(text, options=ParserOptions(**options))


def load(path, encoding="utf-8", **options):
    return Config.from_file(path, options=ParserOptions(**options), encoding=encoding)


def dumps(config, space_around_delimiters=True):
    return config.dumps(space_around_delimiters)
