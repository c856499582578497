"""Bad input: a clear exception naming what is wrong, and nothing applied on the servers."""


def test_each_bad_call_raises_a_clear_error_and_the_servers_keep_their_rows(job):
    run = job("bad_input.py", ["--servers", "2", "--sync", "bsp"], workers=1)
    r = run.result(0)
    failed = [c for c in r["cases"] if not c["ok"]]
    assert not failed, failed
    assert len(r["cases"]) == 17
    assert r["unchanged"], "a refused call changed the servers' rows"
