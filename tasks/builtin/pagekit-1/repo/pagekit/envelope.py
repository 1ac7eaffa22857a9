"""A JSON-ready envelope describing one page of results."""

from pagekit.links import page_links


def page_envelope(page, base_url=None, serialize=lambda item: item):
    """{"items": [...], "page": n, "per_page": k, "total": N, "pages": P, "links": {...}}"""
    paginator = page.paginator
    envelope = {
        "items": [serialize(item) for item in page.object_list],
        "page": page.number,
        "per_page": paginator.per_page,
        "total": paginator.count,
        "pages": paginator.num_pages,
        "range": [page.start_index(), page.end_index()],
    }
    if base_url is not None:
        envelope["links"] = dict(page_links(page, base_url))
    return envelope
