/**
 * Debounced, never-overlapping restarts. N requests within the debounce
 * window run the task once; requests that arrive while it runs are coalesced
 * into one more run after it. No `vscode` import.
 */

export interface Timers {
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimers: Timers = {
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export class RestartScheduler {
  private timer: unknown;
  private running: Promise<void> | undefined;
  private pending = false;
  private disposed = false;
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly task: () => Promise<void>,
    private readonly debounceMs = 500,
    private readonly onError: (error: unknown) => void = () => undefined,
    private readonly timers: Timers = realTimers,
  ) {}

  /** Asks for a run after the debounce delay (restarting the delay). */
  request(): void {
    if (this.disposed) {
      return;
    }
    this.cancelTimer();
    this.timer = this.timers.setTimeout(() => {
      this.timer = undefined;
      this.fire();
    }, this.debounceMs);
  }

  /** Asks for a run now, still never overlapping a running one. */
  runNow(): void {
    if (this.disposed) {
      return;
    }
    this.cancelTimer();
    this.fire();
  }

  get isRunning(): boolean {
    return this.running !== undefined;
  }

  /** True while a run is waiting for its debounce delay or for the current run to end. */
  get isScheduled(): boolean {
    return this.timer !== undefined || this.pending;
  }

  /** Resolves when no run is running, scheduled or pending. */
  whenIdle(): Promise<void> {
    if (!this.isRunning && !this.isScheduled) {
      return Promise.resolve();
    }
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Drops scheduled runs; a running one finishes. */
  dispose(): void {
    this.disposed = true;
    this.cancelTimer();
    this.pending = false;
    this.settleIdle();
  }

  private fire(): void {
    if (this.running !== undefined) {
      this.pending = true;
      return;
    }
    this.running = this.runOnce();
  }

  private async runOnce(): Promise<void> {
    try {
      await this.task();
    } catch (error) {
      this.onError(error);
    }
    this.running = undefined;
    if (this.pending && !this.disposed) {
      this.pending = false;
      this.fire();
      return;
    }
    this.settleIdle();
  }

  private cancelTimer(): void {
    if (this.timer !== undefined) {
      this.timers.clearTimeout(this.timer);
      this.timer = undefined;
    }
  }

  private settleIdle(): void {
    if (this.isRunning || this.isScheduled) {
      return;
    }
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) {
      resolve();
    }
  }
}
