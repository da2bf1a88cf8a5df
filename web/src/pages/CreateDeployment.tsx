// Placeholder: being built.
export function CreateDeployment() {
  return <p>CreateDeployment</p>;
}
