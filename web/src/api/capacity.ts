// GPU capacity, project quotas and GPU usage, typed from the OpenAPI document
// (schema.d.ts, `npm run api-types`), through client.ts's `api` like every other call.
import { api, call, type Deployment, type Schemas } from './client';

/** `GET /api/v1/capacity`. */
export type CapacityReport = Schemas['CapacityReport'];
export type GpuCapacity = Schemas['GpuCapacity'];
export type UnavailableNode = Schemas['UnavailableNode'];
/** `GET /api/v1/projects/{project}/quota`. */
export type ProjectQuota = Schemas['ProjectQuota'];
export type GpuQuotaUse = Schemas['GpuQuotaUse'];
export type GpuRequested = Schemas['GpuRequested'];
/** The body of `PUT /api/v1/projects/{project}/quota` (platform admins). */
export type QuotaSpec = Schemas['QuotaSpec'];
/** `GET /api/v1/projects/{project}/usage?days=N` (project admins). */
export type UsageReport = Schemas['UsageReport'];

/** A deployment as a write returns it: with what the server warns about (absent when nothing). */
export type DeploymentWithWarnings = Deployment;

export function getCapacity(): Promise<CapacityReport> {
  return call(api.GET('/api/v1/capacity'));
}

export function getQuota(project: string): Promise<ProjectQuota> {
  return call(api.GET('/api/v1/projects/{project}/quota', { params: { path: { project } } }));
}

export function putQuota(project: string, body: QuotaSpec): Promise<ProjectQuota> {
  return call(api.PUT('/api/v1/projects/{project}/quota', { params: { path: { project } }, body }));
}

export async function deleteQuota(project: string): Promise<void> {
  await call(api.DELETE('/api/v1/projects/{project}/quota', { params: { path: { project } } }));
}

export function getUsage(project: string, days = 30): Promise<UsageReport> {
  return call(api.GET('/api/v1/projects/{project}/usage', { params: { path: { project }, query: { days } } }));
}

/** `nvidia.com/gpu · NVIDIA-L4`, or just the resource name when there is no product. */
export function gpuLabel(g: { resourceName: string; product?: string | null }): string {
  return g.product ? `${g.resourceName} · ${g.product}` : g.resourceName;
}

/** The query keys, so a write can refresh what it changed. */
export const keys = {
  capacity: ['capacity'] as const,
  quota: (project: string) => ['quota', project] as const,
  usage: (project: string, days: number) => ['usage', project, days] as const,
};
