"""A run's evaluation beside its merges (``wildmerge sample`` on local workers): one thread of this process runs
the evaluation calls in turn while the main thread merges.

Why: the workers' imports (torch, transformers, lm-eval: seconds) and the models that need no merge (the base, the
experts) need not wait for the merges, and a merge can be scored while the next one is made. One thread, so two
calls never write one store's index at once; each call is an ordinary ``evaluate_run`` (the same jobs, job ids,
claims and result files), so a run killed at any moment resumes like any other. The workers started while the
merges run yield the cores to them (``local.beside_merges``) and are replaced once the merges are done.
"""

import queue
import threading
from typing import Any, Dict, List, Optional

from wildmerge.eval.evaluate import check_evaluation, evaluate_run
from wildmerge.eval.local import beside_merges, check_workers, start_workers
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.store import ResultStore
from wildmerge.run import RunFolder


class _Request:
    def __init__(self, model_ids: Optional[List[str]]):
        self.model_ids = model_ids  # None: every model of the plan
        self.done = threading.Event()
        self.summary: Optional[Dict[str, Any]] = None


class EvaluationSession:
    """Start the workers now; ``submit`` model ids (evaluated in order, requests waiting together in one call);
    ``finish``, once the merges are done, evaluates every model of the plan (finished jobs skipped) and returns that
    call's summary. A failure of a call is raised by the next ``submit``, ``wait`` or ``finish``."""

    def __init__(self, run_dir, suite, options: EvalOptions):
        check_workers(options.workers)  # before any worker starts, as ``evaluate_run`` would
        self.run_dir, self.suite, self.options = str(run_dir), suite, options
        self._logs = ResultStore(RunFolder(run_dir).eval_dir(check_evaluation(suite, options).name)).logs_dir
        self._requests: "queue.Queue[Optional[_Request]]" = queue.Queue()
        self._failure: Optional[BaseException] = None
        self._waiting = False  # the thread waits for a request
        self._merging = beside_merges()
        self._merging.__enter__()  # left in finish / close
        self._thread = threading.Thread(target=self._serve, name="wildmerge-evaluation", daemon=True)
        self._thread.start()

    def submit(self, model_ids: Optional[List[str]]) -> _Request:
        self._raise()
        request = _Request(None if model_ids is None else list(model_ids))
        self._requests.put(request)
        return request

    def wait(self, request: _Request) -> Dict[str, Any]:
        request.done.wait()
        self._raise()
        return request.summary

    def finish(self) -> Dict[str, Any]:
        self._merges_done()
        if not (self._waiting and self._requests.empty()):  # models still being scored beside the merges: the next
            start_workers(self.options, self._logs)  # workers, at the usual priority, start while they finish
        try:
            return self.wait(self.submit(None))
        finally:
            self.close()

    def close(self) -> None:
        """No further calls; the one running goes on (its results are whole files; a rerun skips them)."""
        self._merges_done()
        self._requests.put(None)

    def _merges_done(self) -> None:
        if self._merging is not None:
            merging, self._merging = self._merging, None
            merging.__exit__(None, None, None)

    def _raise(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _serve(self) -> None:
        start_workers(self.options, self._logs)  # their imports overlap the first merges
        while True:
            self._waiting = True
            batch = [self._requests.get()]
            self._waiting = False
            while batch[-1] is not None:  # requests made while the last call ran: one call for them all
                try:
                    batch.append(self._requests.get_nowait())
                except queue.Empty:
                    break
            requests = [r for r in batch if r is not None]
            if requests:
                self._run(requests)
            if batch[-1] is None:
                return

    def _run(self, requests: List[_Request]) -> None:
        wanted = [r.model_ids for r in requests]
        ids = None if None in wanted else list(dict.fromkeys(i for ids in wanted for i in ids))
        try:
            if self._failure is None and ids != []:
                summary = evaluate_run(self.run_dir, self.suite, self.options, model_ids=ids)
                for r in requests:
                    r.summary = summary
        except BaseException as exc:  # handed to the main thread
            self._failure = exc
        finally:
            for r in requests:
                r.done.set()
