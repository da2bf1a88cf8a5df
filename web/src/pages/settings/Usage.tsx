// The project's GPU-hours over the last 30 days (the total, by deployment, and by day, a CSS bar each), with
// the requests its model keys sent and its models' tokens.
import { useQuery } from '@tanstack/react-query';
import { getUsage, gpuLabel, keys, type UsageReport } from '../../api/capacity';
import { ErrorState, Loading } from '../../components/States';

const DAYS = 30;

/** GPU-hours with at most two decimals (`12.5`, `0.25`, `3`). */
export function hours(n: number): string {
  return String(Math.round(n * 100) / 100);
}

export function Usage({ project }: { project: string }) {
  const usage = useQuery({ queryKey: keys.usage(project, DAYS), queryFn: () => getUsage(project, DAYS) });
  return (
    <section className="card" aria-labelledby="usage-title" data-testid="gpu-usage">
      <h2 id="usage-title">GPU usage</h2>
      {usage.isPending ? (
        <Loading what="GPU usage" />
      ) : usage.error ? (
        <ErrorState error={usage.error} />
      ) : (
        <Report report={usage.data} />
      )}
    </section>
  );
}

function Report({ report }: { report: UsageReport }) {
  const peak = Math.max(0, ...report.daily.map((d) => d.gpuHours));
  return (
    <>
      <p>
        <strong data-testid="gpu-usage-total">{hours(report.gpuHours)} GPU-hours</strong>{' '}
        <span className="muted">
          from {report.from} to {report.to} (UTC days)
        </span>
      </p>
      <p data-testid="model-usage-total">
        {report.tokens.toLocaleString()} model tokens, {report.requests.toLocaleString()} requests with model keys{' '}
        <span className="muted">(tokens from the models&apos; metrics)</span>
      </p>
      {report.deployments.length > 0 && (
        <div className="table-wrap">
          <table>
            <caption className="visually-hidden">GPU-hours by deployment</caption>
            <thead>
              <tr>
                <th scope="col">Deployment</th>
                <th scope="col">GPU</th>
                <th scope="col">GPU-hours</th>
              </tr>
            </thead>
            <tbody>
              {report.deployments.map((d) => (
                <tr key={`${d.name}/${d.role ?? ''}/${gpuLabel(d)}`}>
                  <td>
                    {d.name}
                    {d.role && <span className="muted"> ({d.role})</span>}
                  </td>
                  <td className="mono">{gpuLabel(d)}</td>
                  <td className="num">{hours(d.gpuHours)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h3 id="usage-daily">By day</h3>
      <ol className="usage-days" aria-labelledby="usage-daily">
        {report.daily.map((d) => (
          <li key={d.date}>
            <time dateTime={d.date}>{d.date}</time>
            <span className="usage-day-bar" aria-hidden="true">
              <span style={{ width: `${peak > 0 ? (d.gpuHours / peak) * 100 : 0}%` }} />
            </span>
            <span className="num">{hours(d.gpuHours)}</span>
            <span className="num muted" title="Model tokens">
              {d.tokens.toLocaleString()} tokens
            </span>
          </li>
        ))}
      </ol>
    </>
  );
}
