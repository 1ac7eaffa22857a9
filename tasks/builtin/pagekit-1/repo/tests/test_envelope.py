from pagekit import Paginator, page_envelope


def test_envelope_fields():
    page = Paginator(list(range(25)), per_page=10).page(2)
    env = page_envelope(page, serialize=str)
    assert env["items"] == [str(i) for i in range(10, 20)]
    assert (env["page"], env["per_page"], env["total"], env["pages"]) == (2, 10, 25, 3)
    assert env["range"] == [11, 20]


def test_envelope_links():
    page = Paginator(list(range(25)), per_page=10).page(1)
    links = page_envelope(page, base_url="/items")["links"]
    assert links["next"] == "/items?page=2"
    assert "prev" not in links
