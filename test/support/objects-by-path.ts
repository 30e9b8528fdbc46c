// An apiserver held in memory as objects by path, for unit tests of the CLI's steps (never for
// testing Kubernetes itself: integration tests use the real cluster). It answers a GET or DELETE
// of one object (a name with ':' may come encoded), and a GET of a collection with a label
// selector `key=value` lists the objects under it that carry that label.
import type { Connection } from '../../kube/connection.ts';
import { ApiError, KubeApi, type KubeObject, type Method, type RequestOptions } from '../../kube/api.ts';

export class ObjectsByPath extends KubeApi {
  readonly objects = new Map<string, KubeObject>();
  /** The paths deleted, in order. */
  readonly deleted: string[] = [];

  constructor(objects: Record<string, KubeObject>) {
    super({ server: 'https://apiserver.invalid', source: 'a fake apiserver' } as Connection);
    for (const [path, obj] of Object.entries(objects)) this.objects.set(path, obj);
  }

  override async request<T>(method: Method, path: string, options: RequestOptions = {}): Promise<T> {
    const selector = options.query?.labelSelector;
    if (method === 'GET' && typeof selector === 'string') {
      const [key, value] = selector.split('=');
      const plural = path.split('/').at(-1)!;
      const items = [...this.objects.entries()].filter(([p, o]) => p.split('/').at(-2) === plural && o.metadata.labels?.[key!] === value).map(([, o]) => structuredClone(o));
      return { items, metadata: {} } as T;
    }
    const key = decodeURIComponent(path);
    const obj = this.objects.get(key);
    if (!obj) throw new ApiError(404, `${key} not found`, 'NotFound');
    if (method === 'GET') return structuredClone(obj) as T;
    if (method === 'DELETE') {
      this.deleted.push(key);
      this.objects.delete(key);
      this.afterDelete(key);
      return structuredClone(obj) as T;
    }
    throw new Error(`the fake apiserver does not answer ${method} ${path}`);
  }

  /** What a deletion takes with it (a subclass's garbage collector). */
  protected afterDelete(_path: string): void {}
}
