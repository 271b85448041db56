/** Deterministic timers for RestartScheduler tests: time only moves on `tick`. */
import type { Timers } from '../../restartScheduler';

interface Pending {
  id: number;
  at: number;
  callback: () => void;
}

export class ManualTimers implements Timers {
  now = 0;
  private nextId = 1;
  private pending: Pending[] = [];

  setTimeout(callback: () => void, ms: number): unknown {
    const id = this.nextId++;
    this.pending.push({ id, at: this.now + ms, callback });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.pending = this.pending.filter((timer) => timer.id !== handle);
  }

  get count(): number {
    return this.pending.length;
  }

  /** Advances time by `ms`, running due callbacks in order, with microtasks flushed after each. */
  async tick(ms: number): Promise<void> {
    const end = this.now + ms;
    for (;;) {
      const due = this.pending.filter((timer) => timer.at <= end).sort((a, b) => a.at - b.at)[0];
      if (due === undefined) {
        break;
      }
      this.pending = this.pending.filter((timer) => timer !== due);
      this.now = due.at;
      due.callback();
      await flush();
    }
    this.now = end;
    await flush();
  }
}

/** Lets pending promise callbacks run. */
export async function flush(rounds = 10): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
}

/** A promise with its resolve/reject exposed. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void; reject: (error: unknown) => void } {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
