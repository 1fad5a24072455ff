"""`make test` ends by saying what it skipped and why (issue 22 item 12): the conftest's terminal
summary groups the skip reasons and names how to enable each group."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


def test_skips_are_summarized_by_reason_at_the_end(pytester):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_some="""
        import pytest

        @pytest.mark.parametrize("i", range(3))
        def test_ui(i):
            pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does it)")

        def test_pg():
            pytest.skip("no PostgreSQL server installed (apt-get install postgresql)")

        def test_ok():
            assert True
        """)
    result = pytester.runpytest("-q", "-ra", "-p", "no:cacheprovider")   # -ra: as pyproject's addopts
    result.assert_outcomes(passed=1, skipped=4)
    out = result.stdout.str()
    tail = out[out.index("what this run skipped, and why"):]
    assert "   3 skipped: Chromium is not installed" in tail and "to run them: apt-get install -y chromium" in tail
    assert "   1 skipped: no PostgreSQL server installed" in tail
    assert "4 tests skipped: this run tested less than CI" in tail
    assert out.index("short test summary info") < out.index("what this run skipped")   # said last


def test_gpu_skips_alone_are_not_called_less_than_ci(pytester):
    """CI has no GPU: a run that skipped only the GPU tests tested what CI tests."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_some="""
        import pytest

        def test_gpu():
            pytest.skip("needs a CUDA GPU")
        """)
    out = pytester.runpytest("-q", "-ra", "-p", "no:cacheprovider").stdout.str()
    assert "1 skipped: GPU tests, which CI skips too" in out and "tested less than CI" not in out


def test_nothing_is_said_when_nothing_skipped(pytester):
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_some="def test_ok():\n    assert True\n")
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "what this run skipped" not in result.stdout.str()
