"""Patch 0054: on the CPU the readers of the engine's shared-memory message
queues (a worker waiting for the engine's next call, the engine core waiting
for the worker's output) block on the queue's notification socket instead of
polling the queue for a second after each read (``SpinCondition``'s
``busy_loop_s``, ``VLLM_SHM_BROADCAST_BUSY_LOOP_S``), so that a waiting
reader does not take a core from the model's threads.

Before it, the engine core polled while the worker computed: 2,230 ms of
polling per 1,000 sentences embedded (all-MiniLM-L6-v2, issue 27)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from unittest import mock

import pytest

from tests.unit.stand_ins import minilm_engine_config

VAR = "VLLM_SHM_BROADCAST_BUSY_LOOP_S"
WAIT_S = 1.5


def test_engine_config_makes_the_queue_readers_block():
    with mock.patch.dict(os.environ):  # the environment the platform writes is restored after
        os.environ.pop(VAR, None)
        minilm_engine_config()
        assert os.environ[VAR] == "0"


def test_a_busy_loop_the_user_set_is_kept():
    with mock.patch.dict(os.environ, {VAR: "0.5"}):
        minilm_engine_config()
        assert os.environ[VAR] == "0.5"


@pytest.mark.parametrize("value", ["fast", "-1", "inf", "nan"])
def test_a_busy_loop_that_is_no_number_of_seconds_is_refused_naming_the_variable(value):
    with mock.patch.dict(os.environ, {VAR: value}):
        with pytest.raises(ValueError, match=f"{VAR}='{value}' is not a number of seconds >= 0: set it to e.g. 0"):
            minilm_engine_config()


@contextlib.contextmanager
def _queue_with_reader(target):
    """A message queue written here and read by ``target(handle, results)`` in
    a spawned process with the environment the CPU platform gives the engine's
    processes (the engine's readers are made by ``MessageQueue.create_from_handle``
    there); yields the writer, ready, and the queue ``target`` puts its results on."""
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    with mock.patch.dict(os.environ):
        os.environ.pop(VAR, None)
        minilm_engine_config()  # the CPU platform sets the readers' environment
        writer = MessageQueue(n_reader=1, n_local_reader=1)
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        reader = context.Process(target=target, args=(writer.export_handle(), results))
        reader.start()
    try:
        writer.wait_until_ready()
        yield writer, results
    finally:
        reader.join(timeout=30)
        if reader.is_alive():
            reader.kill()


def _reader(handle, results):
    """A reader of ``handle``'s queue in a process of its own: reads the first
    message, then measures the CPU seconds it spends in the next ``dequeue``,
    which waits ``WAIT_S`` for the writer's second message."""
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    queue = MessageQueue.create_from_handle(handle, 0)
    queue.wait_until_ready()
    first = queue.dequeue()
    started = time.process_time()
    second = queue.dequeue()
    results.put((first, second, time.process_time() - started))


def test_a_reader_waiting_after_a_read_blocks_instead_of_polling():
    """The engine's readers are made by ``MessageQueue.create_from_handle``
    in the engine's processes, which inherit the platform's environment:
    a reader that has just read and waits 1.5 s for the next message spends
    (almost) no CPU in that wait. With upstream's 1 s busy loop it spends
    about a second (every core it can get, polling with ``sched_yield``)."""
    with _queue_with_reader(_reader) as (writer, results):
        writer.enqueue("step 1")
        time.sleep(WAIT_S)  # the reader reads the first message at once, then waits for this one
        writer.enqueue("step 2")
        first, second, cpu_s = results.get(timeout=120)
    assert (first, second) == ("step 1", "step 2")
    assert cpu_s < 0.15, f"the waiting reader spent {cpu_s:.2f} CPU-s polling in a {WAIT_S} s wait"


def _reader_of_unannounced_message(handle, results):
    from vllm.distributed.device_communicators.shm_broadcast import MessageQueue

    queue = MessageQueue.create_from_handle(handle, 0)
    queue.wait_until_ready()
    started = time.monotonic()
    try:
        message = queue.dequeue(timeout=10)
    except TimeoutError:
        message = None
    results.put((message, time.monotonic() - started))


def test_a_blocked_reader_reads_a_message_whose_notification_was_lost():
    """The notification a writer sends after each write is best-effort (a
    ZeroMQ PUB socket drops what it cannot queue; a reader's subscription may
    still be on its way). A reader that blocks instead of polling still reads a
    message whose notification never came, within its re-check interval, not
    never (0.26.0: the engine hung) or after 5 s (0.32.0's re-check)."""
    with _queue_with_reader(_reader_of_unannounced_message) as (writer, results):
        time.sleep(WAIT_S)  # the reader is blocked on its notification socket
        with mock.patch.object(writer._spin_condition, "notify"):  # the notification is lost
            writer.enqueue("step 1")
        message, waited_s = results.get(timeout=120)
    assert message == "step 1"
    assert waited_s < WAIT_S + 1.0, f"the message was read {waited_s - WAIT_S:.2f} s after it was written"


def _omp_binding(busy_loop_s: str | None):
    """The OpenMP binding the engine core makes for its worker (``auto``:
    vLLM's default) with the readers' busy loop at ``busy_loop_s``
    (None: the CPU platform's default)."""
    from vllm.utils.ompmultiprocessing import OMPProcessManager

    with mock.patch.dict(os.environ):
        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
        os.environ.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
        os.environ.pop(VAR, None)
        if busy_loop_s is not None:
            os.environ[VAR] = busy_loop_s
        manager = OMPProcessManager(minilm_engine_config())
    return manager.cpu_lists, manager.reserved_cpu_list


def test_auto_binding_gives_the_worker_every_core_when_no_reader_polls():
    cpu_lists, reserved = _omp_binding(None)
    polling_cpu_lists, polling_reserved = _omp_binding("1")
    assert len(polling_reserved) == 1  # upstream: a core kept for the polling engine core
    assert reserved == []
    assert cpu_lists == [sorted(polling_cpu_lists[0] + polling_reserved)]
