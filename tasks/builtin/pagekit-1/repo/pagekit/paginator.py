"""Split a sequence into numbered pages (numbers start at 1)."""


class InvalidPage(Exception):
    pass


class PageNotAnInteger(InvalidPage):
    pass


class EmptyPage(InvalidPage):
    pass


class Paginator:
    """Pages of `per_page` items.

    `orphans`: if the last page would hold this many items or fewer, they are
    added to the previous page instead.  `allow_empty_first_page`: whether an
    empty sequence still has one (empty) page.
    """

    def __init__(self, object_list, per_page, orphans=0, allow_empty_first_page=True):
        if int(per_page) <= 0:
            raise ValueError("per_page must be a positive integer")
        self.object_list = object_list
        self.per_page = int(per_page)
        self.orphans = int(orphans)
        self.allow_empty_first_page = allow_empty_first_page
        self._count = None

    @property
    def count(self):
        """Total number of items; uses .count() when the object has one (e.g. a query)."""
        if self._count is None:
            counter = getattr(self.object_list, "count", None)
            if callable(counter):
                try:
                    self._count = counter()
                except TypeError:  # list.count needs an argument
                    self._count = len(self.object_list)
            else:
                self._count = len(self.object_list)
        return self._count

    @property
    def num_pages(self):
        if self.count == 0 and not self.allow_empty_first_page:
            return 0
        hits = max(1, self.count - self.orphans)
        return (hits + self.per_page) // self.per_page

    @property
    def page_range(self):
        return range(1, self.num_pages + 1)

    def validate_number(self, number):
        try:
            if isinstance(number, float) and not number.is_integer():
                raise ValueError
            number = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger(f"page number {number!r} is not an integer") from None
        if number < 1:
            raise EmptyPage("page number is less than 1")
        if number > self.num_pages:
            if number == 1 and self.allow_empty_first_page:
                return number
            raise EmptyPage(f"page {number} contains no results")
        return number

    def get_page(self, number):
        """Like page(), but falls back to the first or last page for bad numbers."""
        try:
            number = self.validate_number(number)
        except PageNotAnInteger:
            number = 1
        except EmptyPage:
            number = max(1, self.num_pages)
        return self.page(number)

    def page(self, number):
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        if top + self.orphans >= self.count:
            top = self.count
        return Page(self.object_list[bottom:top], number, self)


class Page:
    def __init__(self, object_list, number, paginator):
        self.object_list = list(object_list)
        self.number = number
        self.paginator = paginator

    def __repr__(self):
        return f"<Page {self.number} of {self.paginator.num_pages}>"

    def __len__(self):
        return len(self.object_list)

    def __iter__(self):
        return iter(self.object_list)

    def has_next(self):
        return self.number < self.paginator.num_pages

    def has_previous(self):
        return self.number > 1

    def next_page_number(self):
        return self.paginator.validate_number(self.number + 1)

    def previous_page_number(self):
        return self.paginator.validate_number(self.number - 1)

    def start_index(self):
        """1-based index of the first item on this page (0 for an empty page)."""
        if self.paginator.count == 0:
            return 0
        return (self.paginator.per_page * (self.number - 1)) + 1

    def end_index(self):
        """1-based index of the last item on this page."""
        if self.number == self.paginator.num_pages:
            return self.paginator.count
        return self.number * self.paginator.per_page
