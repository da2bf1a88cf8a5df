// Placeholder: being built.
export function DeploymentPage() {
  return <p>DeploymentPage</p>;
}
