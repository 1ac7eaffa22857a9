"""RFC 8288 Link headers for a page: first, prev, next and last relations."""

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def page_url(base_url, number, page_param="page", per_page=None):
    """`base_url` with its page (and per_page) query parameters replaced."""
    scheme, netloc, path, query, fragment = urlsplit(base_url)
    params = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in (page_param, "per_page")]
    params.append((page_param, str(number)))
    if per_page is not None:
        params.append(("per_page", str(per_page)))
    return urlunsplit((scheme, netloc, path, urlencode(params), fragment))


def page_links(page, base_url, page_param="page", include_per_page=False):
    """An ordered dict-like list of (rel, url) for the page."""
    per_page = page.paginator.per_page if include_per_page else None
    last = max(1, page.paginator.num_pages)
    links = [("first", page_url(base_url, 1, page_param, per_page))]
    if page.has_previous():
        links.append(("prev", page_url(base_url, page.number - 1, page_param, per_page)))
    if page.has_next():
        links.append(("next", page_url(base_url, page.number + 1, page_param, per_page)))
    links.append(("last", page_url(base_url, last, page_param, per_page)))
    return links


def link_header(page, base_url, page_param="page", include_per_page=False):
    """The value of a `Link` response header."""
    links = page_links(page, base_url, page_param, include_per_page)
    return ", ".join(f'<{url}>; rel="{rel}"' for rel, url in links)
