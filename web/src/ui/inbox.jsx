// Inbox, the start page (docs/architecture.md#web-dashboard): every run
// that waits for a person across projects and hosts, newest first, each
// with its live pane; a run that is asked something shows the question and
// its answers.
import { hostName, inbox, isActive, markSeen, projects, taskTitle } from '../store.js';
import { Answer } from './answer.jsx';
import { Ago, Empty, StatusBadge } from './common.jsx';
import { Icon } from './icons.jsx';
import { Thumb } from './thumb.jsx';

const reasons = {
  needs_input: { label: 'Needs input', cls: 'st-needs_input' },
  rate_limited: { label: 'Usage limit', cls: 'st-rate_limited' },
  idle: { label: 'Idle', cls: 'st-idle' },
  failed: { label: 'Failed', cls: 'st-failed' },
  completed: { label: 'Completed', cls: 'st-completed' },
};

/** Inbox lists what needs the operator. */
export function Inbox() {
  const list = inbox.value;
  return (
    <section class="inbox">
      <div class="page-head">
        <div>
          <h1>Inbox</h1>
          <p class="muted">Runs that wait for you: asking for input, stopped by a usage limit, idle, failed or finished and not yet seen.</p>
        </div>
        {list.some((x) => !isActive(x.run)) && (
          <button class="btn" onClick={() => list.forEach((x) => markSeen(x.run))}><Icon name="check" size={14} />Mark all seen</button>
        )}
      </div>
      {list.length === 0 ? (
        <Empty icon="check" title="Nothing needs you">When a run asks for input, goes idle, fails or completes, it shows up here.</Empty>
      ) : (
        <div class="inbox-grid">
          {list.map(({ run, why }) => {
            const p = projects.value.get(run.project_id);
            const rs = reasons[why] || { label: why.replace(/_/g, ' '), cls: 'st-' + why };
            return (
              <article key={run.id} class={'inbox-card card why-' + why} data-testid="inbox-card" data-run={run.id} data-why={why}>
                <a class="inbox-link" href={'/runs/' + run.id} data-nav>
                  <header class="inbox-head">
                    <span class={'badge ' + rs.cls}><span class="dot" />{rs.label}</span>
                    <Ago iso={run.attention_since || run.finished_at || run.completed_at || run.updated_at} />
                  </header>
                  <h3 class="inbox-title">{taskTitle(run)}</h3>
                  <p class="meta">
                    {p ? p.name : 'project'} · {run.provider}{run.host_id ? ' · ' + hostName(run.host_id) : ''}
                    {run.failure_reason ? <> · <span class="fail-text">{run.failure_reason.replace(/_/g, ' ')}</span></> : null}
                  </p>
                  <Thumb runId={run.id} live={isActive(run)} lines={why === 'needs_input' || why === 'rate_limited' ? 5 : 8} />
                </a>
                <Answer run={run} compact />
                <footer class="inbox-foot">
                  {isActive(run) ? <StatusBadge status={run.status} /> : <span class="muted sm">attempt {run.attempt}/{run.max_attempts} · <span class="mono">{run.id.slice(0, 8)}</span></span>}
                  {(why === 'needs_input' || why === 'rate_limited') && <a class="btn sm ghost" href={'/runs/' + run.id}>Open<Icon name="chevron" size={12} /></a>}
                  {!isActive(run) && <button class="btn sm ghost" onClick={() => markSeen(run)}>Dismiss</button>}
                </footer>
              </article>
            );
          })}
        </div>
      )}
    </section>
  );
}
