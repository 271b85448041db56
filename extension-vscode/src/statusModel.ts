/**
 * What the status bar item shows, computed from what happened: the client's
 * lifecycle, the server's `$/progress` and `midword/status` notifications,
 * completion latencies, the enable switch and whether the active editor's
 * document is one midword leaves alone (src/where.ts). Pure: no `vscode` import.
 */
import type { Blocked } from './where';


/** Method of the server's custom status notification. */
export const STATUS_NOTIFICATION = 'midword/status';

export type ServerState = 'loading' | 'ready' | 'error';

/** Params of `midword/status`. */
export interface ServerStatus {
  state: ServerState;
  model: string;
  message: string;
  latencyMs: number | null;
  /** Fill-in-the-middle template in use, or "off"; absent when the server does not say. */
  fim?: string;
  /** What computes the model ("llamacpp", "torch", "vllm"); absent when the server does not say. */
  backend?: string;
}

/** A `$/progress` value (LSP WorkDoneProgressBegin / Report / End). */
export type ProgressValue =
  | { kind: 'begin'; title: string; message?: string; percentage?: number; cancellable?: boolean }
  | { kind: 'report'; message?: string; percentage?: number; cancellable?: boolean }
  | { kind: 'end'; message?: string };

/** Where the extension is with the server process. */
export type ClientPhase = 'stopped' | 'starting' | 'running' | 'error';

export type StatusKind = 'stopped' | 'starting' | 'loading' | 'ready' | 'error' | 'disabled' | 'off-here';

export type StatusCommand = 'midword.showLog' | 'midword.toggle' | 'midword.toggleLanguage';

export interface StatusView {
  kind: StatusKind;
  /** Status bar text, with `$(icon)` syntax. */
  text: string;
  tooltip: string;
  command: StatusCommand;
  /** Show with the error background. */
  error: boolean;
}

interface ProgressEntry {
  title: string;
  message?: string;
  percentage?: number;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** Validates `midword/status` params; undefined when they are not usable. */
export function parseServerStatus(params: unknown): ServerStatus | undefined {
  if (!isRecord(params)) {
    return undefined;
  }
  const { state, model, message, latencyMs, fim, backend } = params;
  if (state !== 'loading' && state !== 'ready' && state !== 'error') {
    return undefined;
  }
  return {
    state,
    model: typeof model === 'string' ? model : '',
    message: typeof message === 'string' ? message : '',
    latencyMs: typeof latencyMs === 'number' && Number.isFinite(latencyMs) && latencyMs >= 0 ? latencyMs : null,
    ...(typeof fim === 'string' && fim !== '' ? { fim } : {}),
    ...(typeof backend === 'string' && backend !== '' ? { backend } : {}),
  };
}

/** Status bar words for the FIM template ("FIM off", "FIM qwen-spm"); "" when unknown. */
export function fimLabel(fim: string | undefined): string {
  return fim === undefined ? '' : `FIM ${fim}`;
}

/** Validates a `$/progress` value; undefined when it is not a work-done progress value. */
export function parseProgressValue(value: unknown): ProgressValue | undefined {
  if (!isRecord(value)) {
    return undefined;
  }
  const message = typeof value.message === 'string' ? value.message : undefined;
  const percentage =
    typeof value.percentage === 'number' && Number.isFinite(value.percentage) ? value.percentage : undefined;
  switch (value.kind) {
    case 'begin':
      return { kind: 'begin', title: typeof value.title === 'string' ? value.title : '', message, percentage };
    case 'report':
      return { kind: 'report', message, percentage };
    case 'end':
      return { kind: 'end', message };
    default:
      return undefined;
  }
}

/** Last path component of a model path ("" stays ""). */
export function shortModelName(model: string): string {
  const trimmed = model.replace(/[\\/]+$/, '');
  const parts = trimmed.split(/[\\/]/);
  return parts[parts.length - 1] ?? trimmed;
}

export function formatLatency(ms: number): string {
  return ms >= 10_000 ? `${(ms / 1000).toFixed(0)} s` : ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`;
}

const CLICK_FOR_LOG = 'Click to show the log.';

export class StatusModel {
  private phase: ClientPhase = 'stopped';
  private phaseError = '';
  private server: ServerStatus | undefined;
  private readonly progress = new Map<string, ProgressEntry>();
  /** Progress tokens in the order they began; the last one is shown. */
  private readonly progressOrder: string[] = [];
  private serverLatencyMs: number | undefined;
  private clientLatencyMs: number | undefined;
  private enabled = true;
  /** Why the active editor's document gets no completions (undefined: it gets them, or there is none). */
  private activeBlocked: Blocked | undefined;
  private interpreter = '';
  /** The server announced itself as midword's, which sends `midword/status` when initialized. */
  private awaitsServerStatus = false;

  /** The client starts or stops (a new phase forgets the previous run's server state). */
  setPhase(phase: ClientPhase, errorMessage = ''): void {
    if (phase === 'starting' || phase === 'stopped') {
      this.server = undefined;
      this.progress.clear();
      this.progressOrder.length = 0;
      this.awaitsServerStatus = false;
    }
    this.phase = phase;
    this.phaseError = phase === 'error' ? errorMessage : '';
  }

  /**
   * Whether to wait for the server's first `midword/status` before saying "ready". A server
   * that is not midword's may never send one, and is taken as ready once running.
   */
  setAwaitsServerStatus(awaits: boolean): void {
    this.awaitsServerStatus = awaits;
  }

  setInterpreter(description: string): void {
    this.interpreter = description;
  }

  setEnabled(enabled: boolean): void {
    this.enabled = enabled;
  }

  /** The active editor changed, or the settings that decide where midword completes. */
  setActiveBlocked(blocked: Blocked | undefined): void {
    this.activeBlocked = blocked;
  }

  /** A `midword/status` notification. */
  onServerStatus(status: ServerStatus): void {
    this.server = status;
    if (status.latencyMs !== null) {
      this.serverLatencyMs = status.latencyMs;
    }
  }

  /** A `$/progress` notification for `token`. */
  onProgress(token: string | number, value: ProgressValue): void {
    const key = String(token);
    switch (value.kind) {
      case 'begin':
        this.progress.set(key, { title: value.title, message: value.message, percentage: value.percentage });
        this.progressOrder.push(key);
        return;
      case 'report': {
        const entry = this.progress.get(key);
        if (entry === undefined) {
          return;
        }
        if (value.message !== undefined) {
          entry.message = value.message;
        }
        if (value.percentage !== undefined) {
          entry.percentage = value.percentage;
        }
        return;
      }
      case 'end': {
        this.progress.delete(key);
        const index = this.progressOrder.indexOf(key);
        if (index >= 0) {
          this.progressOrder.splice(index, 1);
        }
        return;
      }
    }
  }

  /** Round trip of one inline completion request, measured by the extension. */
  onCompletionLatency(ms: number): void {
    this.clientLatencyMs = ms;
  }

  /** Latency to show: the server's own figure when it sends one, else the measured round trip. */
  get latencyMs(): number | undefined {
    return this.serverLatencyMs ?? this.clientLatencyMs;
  }

  view(): StatusView {
    const error = this.errorMessage();
    if (error !== undefined) {
      return {
        kind: 'error',
        text: '$(error) midword',
        tooltip: `${error}\n\n${CLICK_FOR_LOG}`,
        command: 'midword.showLog',
        error: true,
      };
    }
    const base = this.baseView();
    if (!this.enabled && base.kind !== 'stopped') {
      return {
        kind: 'disabled',
        text: '$(circle-slash) midword',
        tooltip: `Inline completions are off (the server keeps running). Click to turn them on.\n\n${base.tooltip}`,
        command: 'midword.toggle',
        error: false,
      };
    }
    if (this.activeBlocked !== undefined && base.kind !== 'stopped') {
      return offHereView(this.activeBlocked, base.tooltip);
    }
    return base;
  }

  private errorMessage(): string | undefined {
    if (this.phase === 'error') {
      return this.phaseError !== '' ? this.phaseError : 'midword: the server is not running.';
    }
    if (this.phase === 'running' && this.server?.state === 'error') {
      return `midword server error: ${this.server.message !== '' ? this.server.message : 'unknown error'}`;
    }
    return undefined;
  }

  private baseView(): StatusView {
    const interpreter = this.interpreter !== '' ? `\nPython: ${this.interpreter}` : '';
    if (this.phase === 'stopped') {
      return {
        kind: 'stopped',
        text: '$(debug-stop) midword',
        tooltip: `midword server stopped.${interpreter}\n\n${CLICK_FOR_LOG}`,
        command: 'midword.showLog',
        error: false,
      };
    }
    const latestToken = this.progressOrder[this.progressOrder.length - 1];
    const progress = latestToken !== undefined ? this.progress.get(latestToken) : undefined;
    if (progress !== undefined || this.server?.state === 'loading') {
      const title = progress !== undefined && progress.title !== '' ? progress.title : 'Loading model';
      const message = progress?.message ?? this.server?.message ?? '';
      const percent = progress?.percentage !== undefined ? ` ${Math.round(progress.percentage)}%` : '';
      const model = this.server?.model !== undefined && this.server.model !== '' ? `\nModel: ${this.server.model}` : '';
      return {
        kind: 'loading',
        text: `$(loading~spin) midword${percent}`,
        tooltip: `${title}${message !== '' ? `: ${message}` : ''}${percent !== '' ? ` (${percent.trim()})` : ''}${model}${interpreter}\n\n${CLICK_FOR_LOG}`,
        command: 'midword.showLog',
        error: false,
      };
    }
    const waitingForStatus = this.phase === 'running' && this.awaitsServerStatus && this.server === undefined;
    if (this.phase === 'starting' || waitingForStatus) {
      const what = waitingForStatus ? 'midword server started; waiting for its model status…' : 'Starting the midword server…';
      return {
        kind: 'starting',
        text: '$(loading~spin) midword',
        tooltip: `${what}${interpreter}\n\n${CLICK_FOR_LOG}`,
        command: 'midword.showLog',
        error: false,
      };
    }
    // Running: ready once the server said so, or when a server that is not midword's sends none.
    const model = this.server?.model ?? '';
    const latency = this.latencyMs;
    const latencyText = latency !== undefined ? ` ${formatLatency(latency)}` : '';
    const name = model !== '' ? ` ${shortModelName(model)}` : '';
    const fim = fimLabel(this.server?.fim);
    const lines = [
      `midword ready${model !== '' ? `: ${model}` : ''}`,
      this.server?.backend !== undefined ? `Runs on: ${this.server.backend}` : undefined,
      fim !== '' ? `Fill-in-the-middle: ${this.server?.fim ?? ''}` : undefined,
      this.server?.message !== undefined && this.server.message !== '' ? this.server.message : undefined,
      this.serverLatencyMs !== undefined ? `Last completion: ${formatLatency(this.serverLatencyMs)} (server)` : undefined,
      this.clientLatencyMs !== undefined ? `Last round trip: ${formatLatency(this.clientLatencyMs)}` : undefined,
    ].filter((line): line is string => line !== undefined);
    return {
      kind: 'ready',
      text: `$(sparkle) midword${name}${fim !== '' ? ` · ${fim}` : ''}${latencyText}`,
      tooltip: `${lines.join('\n')}${interpreter}\n\n${CLICK_FOR_LOG}`,
      command: 'midword.showLog',
      error: false,
    };
  }
}

/** The status when the active editor's document is one midword leaves alone. */
function offHereView(blocked: Blocked, serverTooltip: string): StatusView {
  if (blocked.kind === 'excluded') {
    return {
      kind: 'off-here',
      text: '$(circle-slash) midword: excluded file',
      tooltip: `midword never completes this file nor puts it into another file's prompt: it matches "${blocked.pattern}" of midword.excludeFiles.\n\n${serverTooltip}`,
      command: 'midword.showLog',
      error: false,
    };
  }
  const language = blocked.languageId !== '' ? blocked.languageId : 'this file';
  return {
    kind: 'off-here',
    text: `$(circle-slash) midword: off for ${language}`,
    tooltip: `Completions are off for ${language} (midword.languages). Click to turn them on for it.\n\n${serverTooltip}`,
    command: 'midword.toggleLanguage',
    error: false,
  };
}
