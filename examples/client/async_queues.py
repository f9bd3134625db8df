"""The asyncio client: list the queues with their job counts, concurrently.

    FLOTILLA_URL=http://127.0.0.1:8080 FLOTILLA_TOKEN=admin-secret python examples/client/async_queues.py
"""

from __future__ import annotations

import asyncio

from flotilla.client import AsyncClient


async def main() -> None:
    async with AsyncClient() as flotilla:
        queues = await flotilla.queues()
        described = await asyncio.gather(*(flotilla.queue(q.name) for q in queues))
        for queue in described:
            counts = ", ".join(f"{state} {n}" for state, n in (queue.jobs or {}).items() if n)
            print(f"{queue.name:<12} weight {queue.weight:g}  {counts or 'no jobs'}")


if __name__ == "__main__":
    asyncio.run(main())
