from pagekit import Paginator, link_header, page_url


def test_page_url_replaces_page_param():
    assert page_url("https://x.test/items?page=2&q=a", 5) == "https://x.test/items?q=a&page=5"


def test_link_header_middle_page():
    page = Paginator(list(range(95)), per_page=10).page(3)
    header = link_header(page, "https://x.test/items")
    assert '<https://x.test/items?page=2>; rel="prev"' in header
    assert '<https://x.test/items?page=4>; rel="next"' in header
    assert '<https://x.test/items?page=10>; rel="last"' in header


def test_link_header_last_page_has_no_next():
    page = Paginator(list(range(95)), per_page=10).page(10)
    assert 'rel="next"' not in link_header(page, "https://x.test/items")
