"""pagekit: pagination helpers for HTTP APIs."""

from pagekit.envelope import page_envelope
from pagekit.links import link_header, page_url
from pagekit.paginator import EmptyPage, InvalidPage, Page, PageNotAnInteger, Paginator

__all__ = [
    "EmptyPage",
    "InvalidPage",
    "Page",
    "PageNotAnInteger",
    "Paginator",
    "link_header",
    "page_envelope",
    "page_url",
]
__version__ = "2.2.0"
