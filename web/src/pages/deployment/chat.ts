// "Try it": one chat message through modelplane's proxy, which checks the caller's role and
// forwards it to the deployment's model server (see the README's portal section).
import { api, call } from '../../api/client';

export interface ChatAnswer {
  text: string;
  model?: string;
  tokens?: number;
}

export async function sendChat(project: string, name: string, model: string, content: string): Promise<ChatAnswer> {
  const answer = (await call(
    api.POST('/api/v1/projects/{project}/deployments/{name}/chat/completions', {
      params: { path: { project, name } },
      body: { model, messages: [{ role: 'user', content }], max_tokens: 200 },
    }),
  )) as {
    model?: string;
    choices?: { message?: { content?: string } }[];
    usage?: { total_tokens?: number };
  };
  return {
    text: answer.choices?.[0]?.message?.content ?? '(the model sent no message)',
    model: answer.model,
    tokens: answer.usage?.total_tokens,
  };
}
