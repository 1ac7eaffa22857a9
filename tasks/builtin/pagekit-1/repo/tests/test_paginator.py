import pytest

from pagekit import EmptyPage, PageNotAnInteger, Paginator


def test_pages_of_a_list():
    paginator = Paginator(list(range(95)), per_page=10)
    assert paginator.count == 95
    assert paginator.num_pages == 10
    assert paginator.page(3).object_list == list(range(20, 30))
    assert paginator.page(10).object_list == list(range(90, 95))


def test_orphans_join_previous_page():
    paginator = Paginator(list(range(22)), per_page=10, orphans=3)
    assert paginator.num_pages == 2
    assert paginator.page(2).object_list == list(range(10, 22))


def test_empty_list_has_one_page():
    paginator = Paginator([], per_page=10)
    assert paginator.num_pages == 1
    assert paginator.page(1).object_list == []


def test_empty_list_without_empty_first_page():
    paginator = Paginator([], per_page=10, allow_empty_first_page=False)
    assert paginator.num_pages == 0
    with pytest.raises(EmptyPage):
        paginator.page(1)


def test_out_of_range_page():
    with pytest.raises(EmptyPage):
        Paginator(list(range(5)), per_page=2).page(4)


def test_non_integer_page():
    with pytest.raises(PageNotAnInteger):
        Paginator(list(range(5)), per_page=2).page("two")


def test_get_page_falls_back_to_last():
    assert Paginator(list(range(25)), per_page=10).get_page(99).number == 3


def test_start_and_end_index():
    page = Paginator(list(range(25)), per_page=10).page(3)
    assert (page.start_index(), page.end_index()) == (21, 25)


def test_count_from_query_object():
    class Query:
        def count(self):
            return 42

        def __getitem__(self, item):
            return list(range(42))[item]

    paginator = Paginator(Query(), per_page=20)
    assert paginator.num_pages == 3
    assert paginator.page(3).object_list == [40, 41]
