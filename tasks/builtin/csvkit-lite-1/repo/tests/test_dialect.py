from csvlite import sniff


def test_sniff_semicolon():
    assert sniff("a;b;c\n1;2;3\n4;5;6\n").delimiter == ";"


def test_sniff_ignores_quoted_commas():
    assert sniff('x;y\n"1,5";2\n"3,25";4\n').delimiter == ";"


def test_sniff_tab():
    assert sniff("a\tb\n1\t2\n").delimiter == "\t"
