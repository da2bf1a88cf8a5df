// GPU capacity, project quotas and GPU usage. The types mirror the OpenAPI schemas
// CapacityReport, GpuCapacity, ProjectQuota, QuotaSpec and UsageReport, written by hand until
// schema.d.ts is regenerated (`npm run api-types`); then take them from `Schemas` instead and
// call `api` directly. The requests go through client.ts's `api`, so they carry the same token
// and base URL and fail with the same ApiError.
import type { Client } from 'openapi-fetch';
import { api, call, type Deployment, type Problem } from './client';

/** `GET /api/v1/capacity`. */
export interface CapacityReport {
  /** When a worker last reported the cluster; `null` until one has (then `gpus` is empty). */
  observedAt: string | null;
  /** One per (resourceName, product). */
  gpus: GpuCapacity[];
}

export interface GpuCapacity {
  resourceName: string;
  /** `null` when the nodes carry no product label. */
  product: string | null;
  /** Nodes offering this resource and product. */
  nodes: number;
  allocatable: number;
  /** Requested by all pods bound to those nodes. */
  requested: number;
  requestedByModelplane: number;
  /** Over Ready, schedulable nodes: allocatable − requested. */
  free: number;
  /** Most free GPUs on one Ready, schedulable node: what one replica can get now. */
  largestFreeBlock: number;
  /** Most allocatable GPUs on one node: what one replica can ever get. */
  largestNode: number;
  unavailableNodes: UnavailableNode[];
}

export interface UnavailableNode {
  name: string;
  /** `cordoned` or `not Ready`. */
  reason: string;
}

/** `GET /api/v1/projects/{project}/quota`. */
export interface ProjectQuota {
  /** `limit: null`: no replica quota. */
  replicas: { limit: number | null; used: number };
  /** One per GPU quota entry; empty: no GPU quota. */
  gpus: GpuQuotaUse[];
  /** Every GPU the project's specs ask for (replicas × GPUs per replica, canaries included). */
  requested: GpuRequested[];
}

export interface GpuQuotaUse {
  resourceName: string;
  product: string | null;
  limit: number;
  used: number;
}

export interface GpuRequested {
  resourceName: string;
  product: string | null;
  gpus: number;
}

/** The body of `PUT /api/v1/projects/{project}/quota` (platform admins). */
export interface QuotaSpec {
  replicas: number | null;
  gpus: { resourceName: string; product: string | null; limit: number }[];
}

/** `GET /api/v1/projects/{project}/usage?days=N` (project admins). */
export interface UsageReport {
  /** UTC dates, inclusive. */
  from: string;
  to: string;
  gpuHours: number;
  deployments: { name: string; resourceName: string; product: string | null; gpuHours: number }[];
  /** One entry per day from `from` to `to`, days without use included. */
  daily: { date: string; gpuHours: number }[];
}

/** A deployment as a write returns it: with what the server warns about (absent when nothing). */
export type DeploymentWithWarnings = Deployment & { warnings?: string[] };

// The openapi-typescript shape of just these paths, so `api` can be used with them typed.
type Json<T> = { headers: { [name: string]: unknown }; content: { 'application/json': T } };
type Failure = { headers: { [name: string]: unknown }; content: { 'application/problem+json': Problem } };
type ProjectPath = { path: { project: string }; query?: never; header?: never; cookie?: never };
interface CapacityPaths {
  '/api/v1/capacity': {
    get: { parameters: { query?: never; header?: never; path?: never; cookie?: never }; requestBody?: never; responses: { 200: Json<CapacityReport>; 401: Failure } };
  };
  '/api/v1/projects/{project}/quota': {
    get: { parameters: ProjectPath; requestBody?: never; responses: { 200: Json<ProjectQuota>; 401: Failure; 403: Failure; 404: Failure } };
    put: {
      parameters: ProjectPath;
      requestBody: { content: { 'application/json': QuotaSpec } };
      responses: { 200: Json<ProjectQuota>; 401: Failure; 403: Failure; 404: Failure; 422: Failure };
    };
    delete: {
      parameters: ProjectPath;
      requestBody?: never;
      responses: { 204: { headers: { [name: string]: unknown }; content?: never }; 401: Failure; 403: Failure; 404: Failure };
    };
  };
  '/api/v1/projects/{project}/usage': {
    get: {
      parameters: { path: { project: string }; query?: { days?: number }; header?: never; cookie?: never };
      requestBody?: never;
      responses: { 200: Json<UsageReport>; 401: Failure; 403: Failure; 404: Failure; 422: Failure };
    };
  };
}

// The same client instance (middleware, base URL, fetch), seen with these paths' types.
const typed = api as unknown as Client<CapacityPaths>;

export function getCapacity(): Promise<CapacityReport> {
  return call(typed.GET('/api/v1/capacity'));
}

export function getQuota(project: string): Promise<ProjectQuota> {
  return call(typed.GET('/api/v1/projects/{project}/quota', { params: { path: { project } } }));
}

export function putQuota(project: string, body: QuotaSpec): Promise<ProjectQuota> {
  return call(typed.PUT('/api/v1/projects/{project}/quota', { params: { path: { project } }, body }));
}

export async function deleteQuota(project: string): Promise<void> {
  await call(typed.DELETE('/api/v1/projects/{project}/quota', { params: { path: { project } } }));
}

export function getUsage(project: string, days = 30): Promise<UsageReport> {
  return call(typed.GET('/api/v1/projects/{project}/usage', { params: { path: { project }, query: { days } } }));
}

/** `nvidia.com/gpu · NVIDIA-L4`, or just the resource name when there is no product. */
export function gpuLabel(g: { resourceName: string; product: string | null }): string {
  return g.product ? `${g.resourceName} · ${g.product}` : g.resourceName;
}

/** The query keys, so a write can refresh what it changed. */
export const keys = {
  capacity: ['capacity'] as const,
  quota: (project: string) => ['quota', project] as const,
  usage: (project: string, days: number) => ['usage', project, days] as const,
};
