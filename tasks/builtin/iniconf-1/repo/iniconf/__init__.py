"""iniconf: INI configuration files with interpolation and typed values."""

from iniconf.parser import (
    Config,
    ConfigError,
    DuplicateOptionError,
    DuplicateSectionError,
    InterpolationError,
    NoOptionError,
    NoSectionError,
    ParseError,
    ParserOptions,
    SectionProxy,
    dumps,
    load,
    loads,
)

__all__ = [
    "Config",
    "ConfigError",
    "DuplicateOptionError",
    "DuplicateSectionError",
    "InterpolationError",
    "NoOptionError",
    "NoSectionError",
    "ParseError",
    "ParserOptions",
    "SectionProxy",
    "dumps",
    "load",
    "loads",
]
__version__ = "3.0.4"
